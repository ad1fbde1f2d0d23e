"""``serve run <config>`` with a ready line: start it, wait for the API, print the URL.

    python -m deploy.launch deploy/local.yaml      (what ``make serve`` runs)

``serve run`` of a config file logs the replicas' progress (model loading, actors) but not
when the app answers; this polls ``/v1/models`` and prints the URL once it does, then stays
attached to ``serve run`` until Ctrl-C.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml


def _port(config: Path) -> int:
    return int((yaml.safe_load(config.read_text()).get("http_options") or {}).get("port", 8000))


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 600) -> bool:
    start = time.monotonic()
    while proc.poll() is None and time.monotonic() - start < timeout_s:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(1)
    return False


def main(argv: list[str]) -> int:
    config = Path(argv[0] if argv else "deploy/local.yaml")
    url = f"http://127.0.0.1:{_port(config)}"
    serve = Path(sys.executable).with_name("serve")
    proc = subprocess.Popen([str(serve), "run", str(config)])
    try:
        if _wait_ready(url, proc):
            print(f"\n[sonicspec] ready: OpenAI API at {url}/v1 (Ctrl-C to stop)\n", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reached it already; a kill did not
        proc.wait()
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
