"""Under the interpreter, the kernels' exp is torch's CPU exp bit for bit (`sampler.
_triton_interpret`): a kernel stores tl.exp and the kernels' `_exp` of 196 608 float32
values (random over the range the weights exp(x - M) see, and the argument of CPU fuzz case
30877's tie), and both equal torch.exp exactly, while NumPy's float32 exp (the interpreter's
own) differs on many of them: without the shim this test fails. Runs in a subprocess so
that TRITON_INTERPRET never leaks into this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_interpreter_exp_is_torch_exp() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, __file__], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["n"] == 196608
    assert out["tl_exp_vs_torch"] == 0 and out["kernel_exp_vs_torch"] == 0, out
    assert out["case_30877"] == out["torch_case_30877"] == 0.6105811595916748, out
    assert out["numpy_vs_torch"] > out["n"] // 10, out  # (what the shim replaces)


def _main() -> dict:
    global tl, tk  # (the jitted kernel resolves names in these globals)
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    from sampler import triton_kernels as tk

    @triton.jit
    def exps(x_ptr, a_ptr, b_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(a_ptr + offs, tl.exp(x))
        tl.store(b_ptr + offs, tk._exp(x))

    g = torch.Generator().manual_seed(0)
    n = 3 * 65536
    x = torch.cat([-torch.rand(n // 3, generator=g) * 90, torch.randn(n // 3, generator=g),
                   -torch.rand(n // 3, generator=g) * 1e-3])
    x[0] = -0.4933440089225769  # (case 30877: torch 0.61058116, NumPy one ulp above)
    a, b = torch.empty_like(x), torch.empty_like(x)
    exps[(n // 4096,)](x, a, b, BLOCK=4096)
    ref = torch.exp(x)
    return {"n": n, "tl_exp_vs_torch": int((a != ref).sum()),
            "kernel_exp_vs_torch": int((b != ref).sum()),
            "numpy_vs_torch": int((torch.from_numpy(np.exp(x.numpy())) != ref).sum()),
            "case_30877": float(b[0]), "torch_case_30877": float(ref[0])}


if __name__ == "__main__":
    print(json.dumps(_main()))
