"""Chunked calls (`triton_backend.CHUNKS`) against one launch sequence, on the GPU.

For each chunk spec: seeded tokens (and verify's counts) of eager calls and of CUDA-graph
replays equal those of the unchunked eager call; one chunked call of each kind runs under
`torch.cuda.set_sync_debug_mode("error")`.

    python bench/experiments/chunk_check.py [--batch 64 256] [--vocab 262144] [--specs default 64]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[2])
from bench import sampler as bs  # noqa: E402
from sampler import triton_backend as tri  # noqa: E402


def outputs(logits, drafts, first, sb, vb) -> list[torch.Tensor]:
    s = tri.sample(first, sb)
    v = tri.verify(logits, drafts, vb)
    return [s.tokens.clone(), v.tokens.clone(), v.num_accepted.clone(), v.num_emitted.clone()]


def collect(holder: list, inputs: tuple) -> None:
    holder.append(outputs(*inputs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--vocab", type=int, nargs="+", default=[262144])
    ap.add_argument("--specs", nargs="+", default=["default", "64", "32,96"],
                    help="SONICSPEC_CHUNKS values ('default': the backend's rule)")
    args = ap.parse_args()
    bs.SCALE[0] = 8.0
    bad = 0
    for vocab in args.vocab:
        for rows in args.batch:
            inputs = bs.case_inputs(rows, vocab, "cuda")
            tri.CHUNKS = ""
            ref = outputs(*inputs)
            for spec in args.specs:
                tri.CHUNKS = None if spec == "default" else spec
                bounds = tri.chunk_bounds(rows, vocab)
                eager = outputs(*inputs)
                torch.cuda.set_sync_debug_mode("error")
                outputs(*inputs)
                torch.cuda.set_sync_debug_mode(0)
                holder: list[list[torch.Tensor]] = []
                graph = bs.graphed(functools.partial(collect, holder, inputs))
                graph.replay()
                torch.cuda.synchronize()
                replay = holder[-1]
                ok = all(bool((a == b).all()) for a, b in zip(ref, eager)) and all(
                    bool((a == b).all()) for a, b in zip(ref, replay))
                bad += not ok
                print(f"chunks {spec:>8} ({len(bounds)} chunks) B={rows} V={vocab}: "
                      f"eager and replay {'equal' if ok else 'DIFFER'}", flush=True)
    tri.CHUNKS = None
    print("chunk check:", "all equal" if not bad else f"{bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
