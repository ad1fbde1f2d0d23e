"""A few eager calls of the sampler on the benchmark's inputs, for Nsight Compute: run under
`ncu` (bench/experiments/s38_call4.sh) to read each kernel's hardware counters (achieved
occupancy, DRAM and L2 throughput, warp stall reasons). Measurement only.

    ncu ... python3 bench/ncu_run.py --batch 256 --vocab 32000 --mix issue --op verify
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[1])
from bench.sampler import MIX, MIXES, case_inputs  # noqa: E402
from sampler import Sampler  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--mix", default="issue", choices=MIXES)
    ap.add_argument("--op", default="verify", choices=["sample", "verify"])
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    MIX[0] = args.mix
    sampler = Sampler("triton", "cuda")
    logits, drafts, first, sb, vb = case_inputs(args.batch, args.vocab, "cuda", 8.0)
    for _ in range(args.calls):
        if args.op == "sample":
            sampler.sample(first, sb)
        else:
            sampler.verify(logits, drafts, vb)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
