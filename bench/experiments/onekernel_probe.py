"""How much one launch instead of two could save an exact sampler at V = 32000 (a probe).

The least exact temperature sampler of the issue's design, built three ways:
- `one`: a single kernel, one program per (row, tile): the tile's max and sum of
  exp(x / t - max) stored, a barrier, then an atomic ticket per row; the row's last program
  to take it picks a tile with probability proportional to its mass (one Philox draw) and
  the token inside that tile by the inverse CDF over a re-read of it (the tile is in L2),
  then zeroes the ticket for the next call;
- `two`: the same work as two plain launches (tile stats; one program per row draws);
- `two_pdl`: the two launches with programmatic dependent launch, as the sampler launches
  its kernels (the row kernel launched early, waiting with griddepcontrol.wait).
No penalty, bias, grammar or filter: what a call costs with nothing but the read, the merge
and the draw, to set against the sampler's three-kernel chain (`--mix temperature` has no
pre kernel, the issue mix has one) and FlashInfer's top-k/top-p call in the same run.

    TRITON_INTERPRET=1 python bench/experiments/onekernel_probe.py --check   # CPU, small
    python bench/experiments/onekernel_probe.py                              # CUDA table
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

sys.path[0] = str(Path(__file__).resolve().parents[2])
from sampler.sampling import inverse_cdf  # noqa: E402
from sampler.triton_kernels import _after_prior  # noqa: E402

if TYPE_CHECKING:
    from sampler import Sampler

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _stats(x_ptr, row_stride, V, inv_t_ptr, r, t, tmax_ptr, tsum_ptr, T_PAD: tl.constexpr,
           BLOCK: tl.constexpr):
    offs = t * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r.to(tl.int64) * row_stride + offs, mask=offs < V,
                other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
    x = x * tl.load(inv_t_ptr + r)
    m = tl.max(x, 0)
    tl.store(tmax_ptr + r * T_PAD + t, m)
    tl.store(tsum_ptr + r * T_PAD + t, tl.sum(tl.exp(x - m), 0))


@triton.jit
def _pick(tmax_ptr, tsum_ptr, seed_ptr, r, T, T_PAD: tl.constexpr):
    """Row r's tile (of its first T, by their stored max and mass) drawn with probability
    proportional to its mass, the uniform's remaining target inside it, the row's max and
    the uniform."""
    tt = tl.arange(0, T_PAD)
    mt = tl.load(tmax_ptr + r * T_PAD + tt, mask=tt < T, other=float("-inf"),
                 cache_modifier=".cg")
    st = tl.load(tsum_ptr + r * T_PAD + tt, mask=tt < T, other=0.0, cache_modifier=".cg")
    big = tl.max(mt, 0)
    w = st * tl.exp(mt - big)
    u = tl.rand(tl.load(seed_ptr + r), r)
    target = u * tl.sum(w, 0)
    tile = tl.minimum(tl.sum((tl.cumsum(w, 0) <= target).to(tl.int32), 0), T - 1)
    target -= tl.sum(tl.where(tt < tile, w, 0.0), 0)
    return tile, target, big, u


@triton.jit
def _token_in(e, tile, target, V, BLOCK: tl.constexpr):
    """The token of tile `tile` (weights e) where the inverse CDF reaches target."""
    last = tl.minimum(V - tile * BLOCK, BLOCK) - 1
    idx = tl.minimum(tl.sum((tl.cumsum(e, 0) <= target).to(tl.int32), 0), last)
    return tile * BLOCK + idx


@triton.jit
def _draw(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, r, T, tmax_ptr, tsum_ptr, out_ptr,
          u_ptr, T_PAD: tl.constexpr, BLOCK: tl.constexpr):
    tile, target, big, u = _pick(tmax_ptr, tsum_ptr, seed_ptr, r, T, T_PAD)
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r.to(tl.int64) * row_stride + offs, mask=offs < V,
                other=float("-inf")).to(tl.float32)
    e = tl.exp(x * tl.load(inv_t_ptr + r) - big)
    tl.store(out_ptr + r, _token_in(e, tile, target, V, BLOCK))
    tl.store(u_ptr + r, u)


@triton.jit
def _one_kernel(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, T, tmax_ptr, tsum_ptr, tick_ptr,
                out_ptr, u_ptr, T_PAD: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    _stats(x_ptr, row_stride, V, inv_t_ptr, r, tl.program_id(1), tmax_ptr, tsum_ptr, T_PAD,
           BLOCK)
    tl.debug_barrier()  # the tile's stats stored before its ticket (acq_rel) is taken
    if tl.atomic_add(tick_ptr + r, 1) == T - 1:
        _draw(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, r, T, tmax_ptr, tsum_ptr, out_ptr,
              u_ptr, T_PAD, BLOCK)
        tl.store(tick_ptr + r, 0)  # every program of the row has taken its ticket


@triton.jit
def _stats_kernel(x_ptr, row_stride, V, inv_t_ptr, tmax_ptr, tsum_ptr, T_PAD: tl.constexpr,
                  BLOCK: tl.constexpr):
    _after_prior()
    _stats(x_ptr, row_stride, V, inv_t_ptr, tl.program_id(0), tl.program_id(1), tmax_ptr,
           tsum_ptr, T_PAD, BLOCK)


@triton.jit
def _draw_kernel(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, T, tmax_ptr, tsum_ptr, out_ptr,
                 u_ptr, T_PAD: tl.constexpr, BLOCK: tl.constexpr):
    _after_prior()
    _draw(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, tl.program_id(0), T, tmax_ptr, tsum_ptr,
          out_ptr, u_ptr, T_PAD, BLOCK)


class Probe:
    """Buffers for one (rows, vocab, block), and the three ways to run it."""

    def __init__(self, logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                 block: int) -> None:
        self.x, self.inv_t, self.seeds, self.block = logits, 1.0 / temperature, seeds, block
        rows, vocab = logits.shape
        self.tiles = -(-vocab // block)
        self.t_pad = triton.next_power_of_2(self.tiles)
        dev = logits.device
        self.tmax = torch.empty(rows, self.t_pad, dtype=torch.float32, device=dev)
        self.tsum = torch.empty_like(self.tmax)
        self.tick = torch.zeros(rows, dtype=torch.int32, device=dev)
        self.out = torch.empty(rows, dtype=torch.int32, device=dev)
        self.u = torch.empty(rows, dtype=torch.float32, device=dev)

    def one(self) -> torch.Tensor:
        rows, vocab = self.x.shape
        _one_kernel[(rows, self.tiles)](self.x, self.x.stride(0), vocab, self.inv_t, self.seeds,
                                        self.tiles, self.tmax, self.tsum, self.tick, self.out,
                                        self.u, T_PAD=self.t_pad, BLOCK=self.block, num_warps=4)
        return self.out

    def two(self, pdl: bool = False) -> torch.Tensor:
        rows, vocab = self.x.shape
        opts = {"launch_pdl": True} if pdl else {}
        _stats_kernel[(rows, self.tiles)](self.x, self.x.stride(0), vocab, self.inv_t,
                                          self.tmax, self.tsum, T_PAD=self.t_pad,
                                          BLOCK=self.block, num_warps=4, **opts)
        _draw_kernel[(rows,)](self.x, self.x.stride(0), vocab, self.inv_t, self.seeds,
                              self.tiles, self.tmax, self.tsum, self.out, self.u,
                              T_PAD=self.t_pad, BLOCK=self.block, num_warps=4, **opts)
        return self.out


def reference(logits: torch.Tensor, temperature: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF token of each row's softmax(logits / t) at u (float64 weights)."""
    return inverse_cdf(torch.softmax(logits.double() / temperature.double()[:, None], -1), u)


def check() -> None:
    """Each way against the float64 inverse CDF at the kernel's own uniform (CPU or CUDA)."""
    dev = "cuda" if torch.cuda.is_available() and not INTERPRET else "cpu"
    g = torch.Generator().manual_seed(0)
    for rows, vocab, block in ((3, 1000, 256), (2, 777, 128), (4, 300, 512)):
        logits = (torch.randn(rows, vocab, generator=g) * 4).to(dev)
        temp = torch.rand(rows, generator=g).to(dev) + 0.5
        probe = Probe(logits, temp, torch.arange(rows, dtype=torch.int64, device=dev), block)
        ways = {"one": probe.one, "two": probe.two}
        if not INTERPRET:
            ways["two_pdl"] = partial(probe.two, pdl=True)
        for name, fn in ways.items():
            for call in range(2):  # the second call needs the tickets zeroed by the first
                probe.seeds.copy_(torch.arange(rows) + 100 * call)  # (and draws anew)
                probe.out.fill_(-1)
                tok = fn().long().cpu()
                ref = reference(logits.cpu(), temp.cpu(), probe.u.cpu())
                assert torch.equal(tok, ref), (name, rows, vocab, tok, ref)
            assert int(probe.tick.sum()) == 0, name
        print(f"rows={rows} V={vocab} block={block}: {', '.join(ways)} equal the reference")


def measure(sampler: Sampler, rows: int, vocab: int, iters: int) -> list[str]:
    """One size's lines of the table: per tile width the probe's three ways, then the
    sampler (temperature and issue mixes) and FlashInfer's sampling call on the same logits."""
    from bench.sampler import MIX, case_inputs, flashinfer_calls, make_batch, maybe, timed

    MIX[0] = "issue"
    logits, drafts, first, batch, _ = case_inputs(rows, vocab, "cuda", scale=8.0)
    issue = timed(lambda: sampler.sample(first, batch), "cuda", iters)
    fi = maybe(lambda: flashinfer_calls(rows, vocab, logits, drafts)) or {}
    fi_us = maybe(lambda: timed(fi["sample"], "cuda", iters)) if fi else None
    MIX[0] = "temperature"
    tbatch = make_batch(rows, vocab, 1, "cuda")  # (the same logits, temperature rows)
    temp_us = timed(lambda: sampler.sample(first, tbatch), "cuda", iters)
    temp = torch.full((rows,), 0.7, device="cuda")
    seeds = torch.arange(rows, dtype=torch.int64, device="cuda")
    fi_s = f"{fi_us:6.1f} {fi_us / 5:6.1f}" if fi_us else f"{'-':>6} {'-':>6}"
    lines = []
    for block in (1024, 2048):
        probe = Probe(first, temp, seeds, block)
        ways = (probe.one, probe.two, partial(probe.two, pdl=True))
        for fn in ways:  # each way is exact: check it at this size too
            tok = fn().long()
            bad = int((tok != reference(first, temp, probe.u)).sum())
            if bad:
                print(f"  B={rows} V={vocab} block={block}: {bad} rows differ "
                      f"(float32 sums against float64)", file=sys.stderr)
        us = [timed(fn, "cuda", iters) for fn in ways]
        lines.append(f"{rows:>4} {vocab:>7} {block:>5} | {us[0]:6.1f} {us[1]:6.1f} "
                     f"{us[2]:7.1f} | {temp_us:9.1f} {issue:10.1f} | {fi_s}")
    return lines


def bench(batches: list[int], vocabs: list[int], iters: int) -> None:
    from bench.sampler import Sampler

    sampler = Sampler("triton", "cuda")
    print(f"device={torch.cuda.get_device_name()} (graph-replay medians, us; L2 evicted)")
    print(f"{'B':>4} {'V':>7} {'block':>5} | {'one':>6} {'two':>6} {'two_pdl':>7} | "
          f"{'ours temp':>9} {'ours issue':>10} | {'FI':>6} {'FI/5':>6}")
    for vocab in vocabs:
        for rows in batches:
            for line in measure(sampler, rows, vocab, iters):
                print(line, flush=True)


def cli(doc: str, check_fn: Callable[[], None],
        bench_fn: Callable[[list[int], list[int], int], None]) -> None:
    """The probes' command line: check_fn on small shapes, then (without --check) bench_fn's
    table over --batch x --vocab."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="correctness on small shapes only")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256])
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    check_fn()
    if not args.check:
        bench_fn(args.batch, args.vocab, args.iters)


if __name__ == "__main__":
    cli(__doc__, check, bench)
