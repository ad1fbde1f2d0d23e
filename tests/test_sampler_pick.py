"""The two draws from an id-ordered candidate list, `_pick_ids` (one tuple reduction of ids,
the default) and `_pick_scan` (positions, SONICSPEC_PICK_FUSED=0), pick the same token
(CPU, TRITON_INTERPRET=1 in a subprocess, so the interpreter never leaks into this pytest
process): lists with zero weights, padding, nothing positive, a single entry, and uniforms
just below and above every prefix boundary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
R = 64


def test_pick_ids_matches_pick_scan() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["draws"] >= 2500, res
    assert res["mismatches"] == [], res["mismatches"][:5]
    assert res["fallbacks"] > 0, res  # some draws fall back to the last positive entry


def _run() -> dict:
    global tk, tl  # (the jitted function below resolves names in this module's globals)
    import torch
    import triton
    import triton.language as tl

    from sampler import triton_kernels as tk

    @triton.jit
    def both(w_ptr, id_ptr, u_ptr, out_ptr, R: tl.constexpr):
        i = tl.program_id(0)
        rr = tl.arange(0, R)
        w = tl.load(w_ptr + i * R + rr)
        ids = tl.load(id_ptr + i * R + rr)
        u = tl.load(u_ptr + i)
        tl.store(out_ptr + 2 * i, tk._pick_ids(w, ids, u))
        tl.store(out_ptr + 2 * i + 1, tk._pick_scan(w, ids, u, R))

    g = torch.Generator().manual_seed(0)
    rows_w, rows_id, rows_u = [], [], []
    for case in range(300):
        n = int(torch.randint(1, R + 1, (1,), generator=g))
        ids = torch.randperm(5000, generator=g)[:n].sort().values.to(torch.int32)
        w = torch.rand(n, generator=g) ** 4
        w[torch.rand(n, generator=g) < 0.3] = 0.0
        if case % 40 == 0:
            w[:] = 0.0
        wp = torch.cat([w, torch.zeros(R - n)])
        idp = torch.cat([ids, torch.zeros(R - n, dtype=torch.int32)])  # padding: id 0, w 0
        cum = torch.cumsum(w.double(), 0)
        total = float(cum[-1])
        # (u = 1: no prefix exceeds the target, the fallback to the last positive entry)
        us = torch.rand(4, generator=g).tolist() + [1 - 2 ** -24, 1.0]
        if total > 0:  # around three random prefix boundaries
            for c in cum[torch.randint(0, n, (3,), generator=g)].tolist():
                us += [max(c / total - 2e-7, 1e-9), min(c / total + 2e-7, 1 - 2 ** -24)]
        for u in us:
            rows_w.append(wp)
            rows_id.append(idp)
            rows_u.append(u)
    m = len(rows_u)
    out = torch.empty(2 * m, dtype=torch.int32)
    both[(m,)](torch.stack(rows_w), torch.stack(rows_id), torch.tensor(rows_u), out, R=R)
    pairs = out.view(m, 2)
    bad = [(i, a, b) for i, (a, b) in enumerate(pairs.tolist()) if a != b]
    w_all = torch.stack(rows_w)
    u_all = torch.tensor(rows_u)
    fallbacks = int(((w_all.sum(1) > 0) & (u_all == 1.0)).sum())
    return {"draws": m, "mismatches": bad, "fallbacks": fallbacks}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    import interpret_fast  # (this file's folder is on the path: the interpreter's shortcuts)

    interpret_fast.install()
    print(json.dumps(_run()))
