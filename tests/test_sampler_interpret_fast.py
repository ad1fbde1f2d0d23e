"""The interpreter shortcuts (`tests/interpret_fast.py`) give the interpreter's own results:
one kernel of sorts (float and int, both directions, along the minor axis: the only one
`tl.sort` takes), `xor_sum`, the sampler's tuple
reductions (`_add2`, `_min_max`, and over int1), a float tuple reduction (left to the
interpreter) and a non-power-of-two length (a reshape) along each axis, whole and with
keep_dims, runs once plainly and once with the shortcuts (two subprocesses: TRITON_INTERPRET
and the patches never leak into this process), and the two outputs are equal bit for bit
and equal numpy's; the shortcut path is taken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run_mode(mode: str) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, __file__, mode], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_shortcuts_equal_the_interpreter() -> None:
    plain, fast = _run_mode("plain"), _run_mode("fast")
    assert fast["tree_calls"] > 0 and plain["tree_calls"] == 0
    assert fast["skipped_patches"] > 0 and plain["skipped_patches"] == 0
    assert fast["out"] == plain["out"]
    assert plain["bad"] == [] and fast["bad"] == [], (plain["bad"], fast["bad"])


def _main(mode: str) -> dict:
    global tl, tk, _xor, _fsum2  # (the jitted functions resolve names in these globals)
    import interpret_fast
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    from sampler import triton_kernels as tk

    stats = {"tree_calls": 0, "skipped_patches": 0}
    if mode == "fast":
        interpret_fast.install()
        tree = interpret_fast._tree_reduce

        def counted(op, input, tl_):
            out = tree(op, input, tl_)
            stats["tree_calls"] += out is not None
            return out

        interpret_fast._tree_reduce = counted
        from triton.runtime import interpreter as itp

        fast_patch = itp._patch_lang

        def counted_patch(fn):
            scope = fast_patch(fn)
            stats["skipped_patches"] += type(scope).__name__ == "_Unchanged"
            return scope

        itp._patch_lang = counted_patch

    @triton.jit
    def _xor(a, b):
        return a ^ b

    @triton.jit
    def _fsum2(a0, a1, b0, b1):
        return a0 + b0, a1 * b1

    @triton.jit
    def kern(f_ptr, i_ptr, out_f, out_i, R: tl.constexpr, C: tl.constexpr):
        r = tl.arange(0, R)[:, None]
        c = tl.arange(0, C)[None, :]
        f = tl.load(f_ptr + r * C + c)
        x = tl.load(i_ptr + r * C + c)
        tl.store(out_f + r * C + c, tl.sort(f, 1))
        tl.store(out_f + R * C + r * C + c, tl.sort(f, 1, descending=True))
        tl.store(out_i + r * C + c, tl.sort(x, 1, descending=True))
        tl.store(out_i + R * C + r * C + c, tl.sort(x, 1))
        tl.store(out_i + 2 * R * C + tl.arange(0, C), tl.xor_sum(x, 0))
        tl.store(out_i + 2 * R * C + C + tl.arange(0, R), tl.xor_sum(x, 1))
        s0, s1 = tl.reduce((x, x * 3), 1, tk._add2)
        tl.store(out_i + 2 * R * C + C + R + tl.arange(0, R), s0)
        tl.store(out_i + 2 * R * C + C + 2 * R + tl.arange(0, R), s1)
        lo, hi = tl.reduce((x, x), 0, tk._min_max)
        tl.store(out_i + 2 * R * C + C + 3 * R + tl.arange(0, C), lo)
        tl.store(out_i + 2 * R * C + 2 * C + 3 * R + tl.arange(0, C), hi)
        whole = tl.reduce(x, None, _xor)
        tl.store(out_i + 2 * R * C + 3 * C + 3 * R, whole)
        kept = tl.reduce(x, 1, _xor, keep_dims=True)  # [R, 1]
        tl.store(out_i + 2 * R * C + 3 * C + 3 * R + 1 + r, kept)
        n_big, any_big = tl.reduce(((x > 0).to(tl.int32), x > 5), 1, tk._add2)
        tl.store(out_i + 2 * R * C + 3 * C + 4 * R + 1 + tl.arange(0, R), n_big)
        tl.store(out_i + 2 * R * C + 3 * C + 5 * R + 1 + tl.arange(0, R), any_big.to(tl.int32))
        fs, fp = tl.reduce((f, f), 1, _fsum2)  # floats: the interpreter's own path
        tl.store(out_f + 2 * R * C + tl.arange(0, R), fs)
        tl.store(out_f + 2 * R * C + R + tl.arange(0, R), fp)
        x3 = tl.reshape(x, (R * C // 4, 4))  # rows of 4: power of two; columns of R*C/4
        tl.store(out_i + 2 * R * C + 3 * C + 6 * R + 1 + tl.arange(0, 4), tl.xor_sum(x3, 0))

    R, C = 8, 16
    g = torch.Generator().manual_seed(5)
    f = torch.randn(R, C, generator=g)
    f[0, :4] = f[0, 4]  # ties
    x = torch.randint(-50, 50, (R, C), generator=g, dtype=torch.int32)
    out_f = torch.zeros(2 * R * C + 2 * R)
    out_i = torch.zeros(2 * R * C + 3 * C + 6 * R + 1 + 4, dtype=torch.int32)
    kern[(1,)](f, x, out_f, out_i, R, C)

    xn = x.numpy()
    i = 2 * R * C
    want_i = np.concatenate([
        -np.sort(-xn, 1).ravel(), np.sort(xn, 1).ravel(),
        np.bitwise_xor.reduce(xn, 0), np.bitwise_xor.reduce(xn, 1),
        xn.sum(1), (xn * 3).sum(1), xn.min(0), xn.max(0),
        [np.bitwise_xor.reduce(xn.ravel())], np.bitwise_xor.reduce(xn, 1),
        (xn > 0).sum(1), (xn > 5).any(1).astype(np.int32),
        np.bitwise_xor.reduce(xn.reshape(-1, 4), 0)])
    bad = []
    if not np.array_equal(out_i.numpy(), want_i):
        bad.append(f"ints {out_i.tolist()} != {want_i.tolist()}")
    fn = f.numpy()
    if not (np.array_equal(out_f[:R * C].numpy(), np.sort(fn, 1).ravel())
            and np.array_equal(out_f[R * C:i].numpy(), -np.sort(-fn, 1).ravel())):
        bad.append("float sorts")
    if not np.allclose(out_f[i:i + R].numpy(), fn.sum(1), rtol=1e-5, atol=1e-5):
        bad.append("float sums")
    return {**stats, "bad": bad, "out": [out_f.tolist(), out_i.tolist()]}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.path.insert(1, str(Path(__file__).resolve().parent))
    print(json.dumps(_main(sys.argv[1])))
