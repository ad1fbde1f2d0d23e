"""Kernel timeline of the sampler's CUDA-graph replays, programmatic dependent launch on:
where each kernel starts and ends (CUPTI timestamps through torch.profiler), relative to
the replay's first kernel, so the overlaps and gaps on the critical path show. The
profile of `bench/sampler.py --profile` times each kernel alone (PDL off); this shows
them as the benchmark runs them (graph replays, L2 evicted before each).

    python bench/timeline.py [--batch 1 64] [--vocab 32000 262144] [--mix issue]

Prints per (call, B, V): the event-timed replay median (as the benchmark measures it),
the span from the first kernel's start to the last one's end, and per kernel the median
start, end and duration (us).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[1])
from bench.sampler import FLUSH, MIX, MIXES, case_inputs, evict_l2, graphed, timed  # noqa: E402
from sampler import Sampler  # noqa: E402


def replay_kernels(fn, iters: int) -> list[list[tuple[str, float, float]]]:
    """Per replay of fn's graph: its kernels as (name, start us, end us), in start order."""
    from torch.profiler import ProfilerActivity, profile

    graph = graphed(fn)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            evict_l2()
            graph.replay()
        torch.cuda.synchronize()
    kernels = []
    for ev in prof.profiler.kineto_results.events():
        if ev.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        name = ev.name()
        start = ev.start_ns() / 1e3
        kernels.append((name, start, start + ev.duration_ns() / 1e3))
    kernels.sort(key=lambda k: k[1])
    replays: list[list[tuple[str, float, float]]] = []
    current: list[tuple[str, float, float]] = []
    for name, start, end in kernels:
        if name.startswith("_"):  # the sampler's Triton kernels
            current.append((name, start, end))
        elif current:  # another kernel (the L2 eviction) ends a replay
            replays.append(current)
            current = []
    return replays + ([current] if current else [])


def report(label: str, fn, iters: int) -> None:
    replays = replay_kernels(fn, iters)
    names = [k[0] for k in replays[0]]
    replays = [r for r in replays if [k[0] for k in r] == names]
    t0 = [r[0][1] for r in replays]
    span = statistics.median(max(k[2] for k in r) - r[0][1] for r in replays)
    print(f"{label}: replay {timed(fn, 'cuda', iters):.1f} us, kernels' span {span:.1f} us "
          f"({len(replays)} replays)")
    for i, name in enumerate(names):
        start = statistics.median(r[i][1] - t for r, t in zip(replays, t0))
        end = statistics.median(r[i][2] - t for r, t in zip(replays, t0))
        dur = statistics.median(r[i][2] - r[i][1] for r in replays)
        print(f"    {name[:24]:24s} start {start:7.1f}  end {end:7.1f}  ({dur:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 262144])
    ap.add_argument("--mix", default="issue", choices=MIXES)
    ap.add_argument("--scale", type=float, default=8.0)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--flush", default=FLUSH[0], choices=["write", "clean"],
                    help="how the L2 is evicted before each replay (bench/sampler.py evict_l2)")
    args = ap.parse_args()
    MIX[0] = args.mix
    FLUSH[0] = args.flush
    sampler = Sampler("triton", "cuda")
    for vocab in args.vocab:
        for rows in args.batch:
            logits, drafts, first, sb, vb = case_inputs(rows, vocab, "cuda", args.scale)
            report(f"sample B={rows} V={vocab}",
                   lambda x=first, b=sb: sampler.sample(x, b), args.iters)
            report(f"verify B={rows} V={vocab}",
                   lambda x=logits, d=drafts, b=vb: sampler.verify(x, d, b), args.iters)


if __name__ == "__main__":
    main()
