"""What the sampler would cost with its pre kernel off the critical path (measurement only).

The pre kernel (patch and thresholds) precedes the tile kernel, whose grid launches only at
the pre grid's last wave. Any design that overlaps the two (e.g. chunks of requests on two
streams, one chunk's pre kernel beside another's tile kernel) saves at most the pre kernel's
time. This probe bounds that saving: `triton_backend._pre` is replaced by a stand-in that
runs the real pre kernel once, outside the graph, and inside it only copies the thresholds
and the patch bits into the call's buffers (two copy kernels; the patch values are reused
in place). The results are those of the real pre kernel, so tokens are unchanged.

    python bench/experiments/pre_hidden_probe.py [--batch 64 256] [--vocab 32000 262144]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[2])
from bench import sampler as bs  # noqa: E402
from sampler import Sampler  # noqa: E402
from sampler import triton_backend as tri  # noqa: E402

REAL_PRE = tri._pre


def cached_pre():
    """A stand-in for `_pre` that computes once per input shape and then copies."""
    cache: dict[tuple, tuple] = {}

    def pre(logits, drafts, num_draft, head, bits, has_patch, tick, thr, gmax=None, pval=None):
        key = (tuple(logits.shape), logits.data_ptr())
        if key not in cache:
            b0, t0 = torch.empty_like(bits), None if thr is None else torch.empty_like(thr)
            pval = REAL_PRE(logits, drafts, num_draft, head, b0, has_patch, tick, t0, gmax)
            torch.cuda.synchronize()
            cache[key] = (b0, t0, pval)
        b0, t0, pval = cache[key]
        if has_patch:
            bits.copy_(b0)
        if thr is not None:
            thr.copy_(t0)
        return pval

    return pre


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 262144])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--flush", default="write", choices=["write", "clean"])
    args = ap.parse_args()
    bs.SCALE[0] = 8.0
    bs.FLUSH[0] = args.flush
    sampler = Sampler("triton", "cuda")
    bw = bs.copy_bandwidth("cuda")
    print(f"copy {bw / 1e9:.0f} GB/s, flush {args.flush}; us: main / pre hidden (floor)")
    for vocab in args.vocab:
        for b in args.batch:
            logits, drafts, first, sb, vb = bs.case_inputs(b, vocab, "cuda")
            calls = {"sample": lambda x=first, r=sb: sampler.sample(x, r),
                     "verify": lambda x=logits, d=drafts, r=vb: sampler.verify(x, d, r)}
            for name, fn in calls.items():
                tri._pre = REAL_PRE
                want = fn().tokens.clone()
                main_us = bs.timed(fn, "cuda", args.iters)
                tri._pre = cached_pre()
                same = bool(torch.equal(fn().tokens, want))
                hidden_us = bs.timed(fn, "cuda", args.iters)
                tri._pre = REAL_PRE
                floor = b * vocab * 4 * (1 if name == "sample" else bs.K + 1) / bw * 1e6
                print(f"{name} B={b} V={vocab}: {main_us:7.1f} / {hidden_us:7.1f} "
                      f"(floor {floor:6.1f}, tokens {'equal' if same else 'DIFFER'})",
                      flush=True)


if __name__ == "__main__":
    main()
