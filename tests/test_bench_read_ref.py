"""The benchmark's two-stage read reference (bench/read_ref.py) computes what it claims: the
rows' log-sum-exp from per-tile maxima and sums, under the Triton interpreter on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_read_ref_matches_torch_logsumexp() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "bench/read_ref.py"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = float(proc.stdout.strip().rsplit("=", 1)[1])
    assert err < 1e-4, proc.stdout
