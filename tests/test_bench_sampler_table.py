"""`bench/sampler.py --table`: a saved run's markdown table, ratios and the change against
another run, computed from the JSON (two rows of made-up figures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _row(b: int, v: int, sample: float, verify: float) -> dict:
    return {"B": b, "V": v, "sample_us": sample, "verify_us": verify,
            "sample_floor_us": sample / 4, "verify_floor_us": verify / 2,
            "flashinfer_sample_us": 5 * sample, "flashinfer_verify_us": None,
            "torch_sample_us": 30 * sample, "torch_verify_us": 40 * verify}


def test_table_from_saved_runs(tmp_path: Path) -> None:
    run, base = tmp_path / "run.json", tmp_path / "base.json"
    run.write_text(json.dumps({"rows": [_row(1, 32000, 10.0, 20.0), _row(64, 32000, 30.0, 80.0)]}))
    base.write_text(json.dumps({"rows": [_row(1, 32000, 10.5, 20.0), _row(64, 32000, 30.0, 77.0)]}))
    proc = subprocess.run([sys.executable, "bench/sampler.py", "--table", str(run), "--against",
                           str(base)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[2] == "| 1 | 32000 | 10.0 | 50.0 | 5.00 | 4 | 20.0 | - | - | 2 |"
    assert lines[3] == "| 64 | 32000 | 30.0 | 150.0 | 5.00 | 4 | 80.0 | - | - | 2 |"
    assert "sample: 30-30x the graphed torch backend" in lines
    assert "verify: 40-40x the graphed torch backend" in lines
    assert lines[-1] == "largest change against the base run: 3.00 us (verify B = 64, V = 32000)"
