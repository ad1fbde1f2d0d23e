"""Measurement: the sampler's kernels with one shared-memory carveout for all of them.

An SM runs CTAs of kernels with different L1 / shared-memory splits only after draining
(the split is per SM), so with the driver's default choice per kernel (the tile kernel's
2-8 KB a program x 9 programs needs a larger split than the pre kernel's) a PDL-launched
grid may start only on SMs that the previous grid has left entirely. This sets
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT on every loaded sampler kernel (-1 the
driver's default, else a percentage of the maximum) and prints the timeline of
`bench/timeline.py` for each value, in one process (one compilation).

    python bench/experiments/carveout.py [--carveouts -1 50 100]
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

import torch
import triton

sys.path[0] = str(Path(__file__).resolve().parents[2])
FUNCS: dict[tuple[str, str], int] = {}


def _loaded(module, function, name, metadata_group, hash_):  # noqa: ARG001
    FUNCS[(name, hash_)] = function


triton.knobs.runtime.kernel_load_end_hook.add(_loaded)

from bench.sampler import case_inputs  # noqa: E402
from bench.timeline import report  # noqa: E402
from sampler import Sampler  # noqa: E402

CARVEOUT = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT


def set_all(libcuda, pct: int) -> None:
    for (name, _), fn in FUNCS.items():
        if name.startswith("_"):
            rc = libcuda.cuFuncSetAttribute(ctypes.c_void_p(fn), CARVEOUT, ctypes.c_int(pct))
            assert rc == 0, (name, rc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--carveouts", type=int, nargs="+", default=[-1, 50, 100])
    ap.add_argument("--sizes", nargs="+", default=["256x262144", "64x262144", "256x128256",
                                                   "64x128256", "256x32000", "64x32000"])
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    libcuda = ctypes.CDLL("libcuda.so.1")
    sampler = Sampler("triton", "cuda")
    cases = []
    for size in args.sizes:
        rows, vocab = (int(x) for x in size.split("x"))
        logits, drafts, first, sb, vb = case_inputs(rows, vocab, "cuda", 8.0)
        sampler.sample(first, sb)
        sampler.verify(logits, drafts, vb)
        cases.append((rows, vocab, logits, drafts, first, sb, vb))
    torch.cuda.synchronize()
    print("loaded:", sorted({name for name, _ in FUNCS}), flush=True)
    for pct in args.carveouts:
        set_all(libcuda, pct)
        print(f"== carveout {pct}", flush=True)
        for rows, vocab, logits, drafts, first, sb, vb in cases:
            report(f"sample B={rows} V={vocab}", lambda x=first, b=sb: sampler.sample(x, b),
                   args.iters)
            report(f"verify B={rows} V={vocab}",
                   lambda x=logits, d=drafts, b=vb: sampler.verify(x, d, b), args.iters)


if __name__ == "__main__":
    main()
