"""Load test of the Serve app over HTTP: throughput and latency, speculation on vs off.

An asyncio + httpx client streams /v1/completions at concurrency {1, 8, 32}, each request
with ``ignore_eos`` so every one produces ``--max-tokens`` tokens. Speculation off is the
same server with ``num_speculative_tokens: 0`` per request. Metrics (vLLM's
benchmark_serving definitions):

  TTFT  time from sending the request to the first streamed token
  TPOT  (latency - TTFT) / (output tokens - 1), per request
  ITL   gaps between consecutive streamed chunks (one chunk carries every token a step
        emitted for the request, so with speculation one gap may cover several tokens)
  mean acceptance length  tokens emitted per decode step, from the responses' usage
  hop   engine -> model actor round trip minus in-actor compute, measured in the engine
        (GET /stats), p50 / p99 per method

Without ``--url`` it starts the app itself (Ray with 2 CPUs, deploy/local.yaml's args).
Prints a table and writes bench/results/serve-<device>.json.

    python bench/serve.py [--url http://127.0.0.1:8000] [--concurrency 1 8 32]
                          [--requests-per-level 4 16 32] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import httpx
import yaml
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
# `python bench/serve.py` puts bench/ first on sys.path, where bench/sampler.py would shadow
# the sampler package (in this process and in Ray's workers, which copy the driver's path).
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
PROMPTS = [
    "Explain in a few sentences why the sky is blue.",
    "Write a short poem about the sea.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "List three uses of speculative decoding in production systems.",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Summarise the plot of Romeo and Juliet in two sentences.",
]


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


async def one_request(http: httpx.AsyncClient, model: str, i: int, args, spec: bool) -> dict:
    body = {"model": model, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": args.max_tokens,
            "temperature": args.temperature, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}, "seed": i}
    if not spec:
        body["num_speculative_tokens"] = 0
    t0 = time.perf_counter()
    stamps: list[float] = []
    usage = None
    async with http.stream("POST", "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if any(c.get("text") for c in chunk.get("choices", [])):
                stamps.append(time.perf_counter())
    assert usage is not None and stamps, "stream ended without tokens or usage"
    end = time.perf_counter()
    n = usage["completion_tokens"]
    ttft = stamps[0] - t0
    return {"ttft": ttft, "latency": end - t0, "tokens": n,
            "tpot": (end - t0 - ttft) / (n - 1) if n > 1 else 0.0,
            "itl": [b - a for a, b in zip(stamps, stamps[1:])],
            "spec": usage["speculation"]}


async def run_level(url: str, model: str, concurrency: int, num: int, args, spec: bool) -> dict:
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        await http.get("/stats", params={"reset": True})
        gate = asyncio.Semaphore(concurrency)
        bar = tqdm(total=num, desc=f"spec={'on ' if spec else 'off'} c={concurrency:<2}",
                   file=sys.stderr, leave=False)

        async def gated(i: int) -> dict:
            async with gate:
                out = await one_request(http, model, i, args, spec)
                bar.update()
                return out

        t0 = time.perf_counter()
        rows = await asyncio.gather(*(gated(i) for i in range(num)))
        duration = time.perf_counter() - t0
        bar.close()
        stats = (await http.get("/stats")).json()
    return summarise(rows, duration, concurrency, spec, stats)


def summarise(rows: list[dict], duration: float, concurrency: int, spec: bool,
              stats: dict) -> dict:
    ms = lambda xs, q: 1000 * pct(xs, q)  # noqa: E731
    ttft = [r["ttft"] for r in rows]
    tpot = [r["tpot"] for r in rows]
    itl = [x for r in rows for x in r["itl"]]
    steps = sum(r["spec"]["decode_steps"] for r in rows)
    accepted = sum(r["spec"]["accepted_tokens"] for r in rows)
    out = {"speculation": spec, "concurrency": concurrency, "requests": len(rows),
           "duration_s": duration, "request_throughput": len(rows) / duration,
           "output_tok_s": sum(r["tokens"] for r in rows) / duration,
           "mean_acceptance_length": (accepted + steps) / steps if steps else 0.0,
           "mean_ttft_ms": 1000 * statistics.mean(ttft),
           "mean_tpot_ms": 1000 * statistics.mean(tpot),
           "mean_itl_ms": 1000 * statistics.mean(itl) if itl else 0.0,
           "hops": stats.get("hops", {}), "engine_step_ms_mean": stats.get("step_ms_mean")}
    for name, xs in (("ttft", ttft), ("tpot", tpot), ("itl", itl)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_ms"] = ms(xs, q)
    return out


def start_local(args) -> tuple[str, str]:
    """Deploy deploy/local.yaml's app in this process (2-CPU Ray); its URL and model id."""
    import ray
    from ray import serve

    from deploy.app import build_app
    from deploy.config import AppArgs

    cfg = yaml.safe_load((ROOT / "deploy" / "local.yaml").read_text())["applications"][0]
    app_args = AppArgs.model_validate({**cfg["args"], "max_slots": args.max_slots})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    print(f"[bench] starting the app (max_slots={args.max_slots}) ...", file=sys.stderr)
    serve.run(build_app(app_args), name="sonicspec", route_prefix="/")
    return f"http://127.0.0.1:{args.port}", app_args.model_name


def table(results: list[dict]) -> str:
    head = ("spec c   req/s   tok/s  acc.len  TTFT p50/p90/p99 ms     TPOT p50/p90/p99 ms"
            "     ITL p50/p90/p99 ms      hop p50/p99 ms (propose, verify)")
    lines = [head]
    for r in results:
        hops = ", ".join(_hop(r, m) for m in ("draft.propose", "target.verify"))
        lines.append(f"{'on ' if r['speculation'] else 'off'}  {r['concurrency']:<3}"
                     f"{r['request_throughput']:6.2f}  {r['output_tok_s']:6.1f}  "
                     f"{r['mean_acceptance_length']:7.2f}  {_trio(r, 'ttft'):>22}  "
                     f"{_trio(r, 'tpot'):>22}  {_trio(r, 'itl'):>22}  {hops}")
    return "\n".join(lines)


def _trio(r: dict, name: str) -> str:
    return "/".join(f"{r[f'{name}_p{q}_ms']:.0f}" for q in (50, 90, 99))


def _hop(r: dict, method: str) -> str:
    h = r["hops"].get(method, {})
    return f"{h.get('hop_p50_ms', 0):.2f}/{h.get('hop_p99_ms', 0):.2f}"


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0).replace(" ", "-").lower()
    return "cpu"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="a running server (default: start deploy/local.yaml here)")
    ap.add_argument("--model", default="embedded:smollm2-135m")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests-per-level", type=int, nargs="+", default=[4, 16, 32])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-slots", type=int, default=8)
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if len(args.requests_per_level) != len(args.concurrency):
        ap.error("--requests-per-level needs one count per --concurrency level")
    url, model = (args.url, args.model) if args.url else start_local(args)
    results = []
    for spec in (True, False):
        for c, n in zip(args.concurrency, args.requests_per_level):
            results.append(asyncio.run(run_level(url, model, c, n, args, spec)))
            print(table(results[-1:]).splitlines()[1], file=sys.stderr)
    print(table(results))
    out = args.out or ROOT / "bench" / "results" / f"serve-{device_name()}.json"
    out.write_text(json.dumps({"device": device_name(), "host": platform.node(),
                               "max_tokens": args.max_tokens, "temperature": args.temperature,
                               "max_slots": args.max_slots, "results": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
