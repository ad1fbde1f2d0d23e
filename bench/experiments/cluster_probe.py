"""What a thread-block cluster could save an exact sampler's chain of kernels (a probe).

The sampler runs each call as a chain of grids (pre, tile, finish) that meet through global
memory and programmatic dependent launch; at V = 32000 and small B that chain's latency, not
the read, is what misses item 9 (bench/NOTES-sampler.md, runs 205-206). Hopper can launch the
programs of one row as a cluster of NC CTAs, which the hardware schedules together and which
can meet at `barrier.cluster` without an atomic ticket or a second launch. Triton 3.6 cannot
compile a reduction for num_ctas > 1 (its PlanCTA pass fails), so the kernel here is compiled
for one CTA and launched as clusters by Triton's own launcher with num_ctas = NC in the
packed metadata (grid x NC CTAs, cluster dimension NC); the CTAs meet through global memory
and the barrier's release / acquire.

The least exact temperature sampler of onekernel_probe (a chunk's max and mass, a chunk drawn
by its mass with one Philox number, the token by the inverse CDF inside it), one cluster a
row, each CTA one chunk of ceil(V / NC) tokens rounded up to a power of two:
- `draw`: every CTA stores its chunk's stats and arrives; the last CTA waits and draws,
  re-reading the chosen chunk (as `one` and `two` do);
- `own`: every CTA arrives and waits, reads the row's stats, and the CTA that owns the chosen
  chunk finds the token in the values it still holds in registers (no re-read);
- `own` with PHASES > 1: as `own`, after PHASES - 1 extra exchanges (each CTA stores its
  chunk's max, the cluster meets, each reads the row's maxima), the cost of one more meeting
  such as a row threshold's, as the sampler's pre kernel computes before the candidates.
No penalty, bias, grammar or filter. Set against onekernel_probe's `one` (a ticket) and
`two_pdl` (two launches under PDL) and the sampler's temperature and issue mixes.

    TRITON_INTERPRET=1 python bench/experiments/cluster_probe.py --check   # CPU, small
    python bench/experiments/cluster_probe.py                              # CUDA table
The interpreter runs the programs one after another and has no cluster, so its check covers
`draw` only (the drawer is the row's last CTA, which the interpreter runs last); on CUDA
every way is checked at every size.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path[0] = str(Path(__file__).resolve().parents[2])
from bench.experiments.onekernel_probe import (  # noqa: E402
    Probe,
    _draw,
    _pick,
    _token_in,
    reference,
)

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

if INTERPRET:  # (no cluster: the interpreter runs the CTAs in order)

    @triton.jit
    def _arrive():
        pass

    @triton.jit
    def _wait():
        pass

else:

    @triton.jit
    def _arrive():
        """barrier.cluster.arrive.release: this thread's earlier stores visible, at cluster
        scope, to the threads that then wait."""
        tl.inline_asm_elementwise("barrier.cluster.arrive.release.aligned; mov.u32 $0, 0;",
                                  "=r,r", [tl.program_id(0)], dtype=tl.int32, is_pure=False,
                                  pack=1)

    @triton.jit
    def _wait():
        """barrier.cluster.wait.acquire: until every thread of the cluster has arrived."""
        tl.inline_asm_elementwise("barrier.cluster.wait.acquire.aligned; mov.u32 $0, 0;",
                                  "=r,r", [tl.program_id(0)], dtype=tl.int32, is_pure=False,
                                  pack=1)


@triton.jit
def _cluster_kernel(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, T, tmax_ptr, tsum_ptr, xch_ptr,
                    out_ptr, u_ptr, NC: tl.constexpr, BLOCK: tl.constexpr,
                    OWNER: tl.constexpr, PHASES: tl.constexpr):
    """One CTA per (row, chunk): CTA c of row r is program r * NC + c. T: the chunks that
    hold tokens (the rest of a row's NC may lie past V)."""
    pid = tl.program_id(0)
    r = pid // NC
    c = pid % NC
    offs = c * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r.to(tl.int64) * row_stride + offs, mask=offs < V,
                other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
    x = x * tl.load(inv_t_ptr + r)
    m = tl.max(x, 0)
    row_max = m
    n_prog = tl.num_programs(0)
    for p in tl.static_range(PHASES - 1):  # extra meetings: the row's max, exchanged
        tl.store(xch_ptr + p * n_prog + pid, m)
        _arrive()
        _wait()
        cc = tl.arange(0, NC)
        row_max = tl.maximum(row_max, tl.max(
            tl.load(xch_ptr + p * n_prog + r * NC + cc, mask=cc < T, other=float("-inf"),
                    cache_modifier=".cg"), 0))
    tl.store(tmax_ptr + pid, m)
    tl.store(tsum_ptr + pid, tl.sum(tl.exp(x - tl.where(m == float("-inf"), 0.0, m)), 0))
    _arrive()
    if OWNER:
        _wait()
        tile, target, big, u = _pick(tmax_ptr, tsum_ptr, seed_ptr, r, T, NC)
        big = tl.maximum(big, row_max)  # (the same number: a meeting's result is used)
        if tile == c:
            tl.store(out_ptr + r, _token_in(tl.exp(x - big), tile, target, V, BLOCK))
            tl.store(u_ptr + r, u)
    elif c == NC - 1:
        _wait()
        _draw(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, r, T, tmax_ptr, tsum_ptr, out_ptr,
              u_ptr, NC, BLOCK)
        tl.store(xch_ptr + (PHASES - 1) * n_prog + pid, row_max)  # (a meeting's result used)


class ClusterProbe:
    """Buffers for one (rows, vocab, NC, PHASES), and the kernel launched as clusters."""

    def __init__(self, logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                 nc: int, phases: int = 1) -> None:
        self.x, self.inv_t, self.seeds, self.nc, self.phases = logits, 1.0 / temperature, \
            seeds, nc, phases
        rows, vocab = logits.shape
        self.block = triton.next_power_of_2(-(-vocab // nc))
        self.live = -(-vocab // self.block)
        dev = logits.device
        self.tmax = torch.empty(rows, nc, dtype=torch.float32, device=dev)
        self.tsum = torch.empty_like(self.tmax)
        self.xch = torch.empty(phases, rows, nc, dtype=torch.float32, device=dev)
        self.out = torch.empty(rows, dtype=torch.int32, device=dev)
        self.u = torch.empty(rows, dtype=torch.float32, device=dev)
        self.launchers: dict[bool, object] = {}

    def run(self, owner: bool) -> torch.Tensor:
        rows, vocab = self.x.shape
        args = (self.x, self.x.stride(0), vocab, self.inv_t, self.seeds, self.live, self.tmax,
                self.tsum, self.xch, self.out, self.u)
        consts = {"NC": self.nc, "BLOCK": self.block, "OWNER": owner, "PHASES": self.phases}
        warps = min(16, max(4, self.block // 512))
        if INTERPRET:
            _cluster_kernel[(rows * self.nc,)](*args, **consts, num_warps=warps)
            return self.out
        if owner not in self.launchers:
            kernel = _cluster_kernel.warmup(*args, **consts, num_warps=warps,
                                            grid=(rows * self.nc,))
            if hasattr(kernel, "result"):  # (an asynchronous compile's future)
                kernel = kernel.result()
            run = kernel.run  # (loads the module: kernel.function is set from here on)
            packed = (kernel.metadata.num_warps, self.nc, kernel.metadata.shared)
            self.launchers[owner] = (run, kernel.function, packed)
        run, function, packed = self.launchers[owner]
        stream = torch.cuda.current_stream().cuda_stream
        # Triton's launcher: grid x NC CTAs in clusters of NC (non-portable 16 allowed)
        run(rows, 1, 1, stream, function, packed, None, None, None, *args,
            *consts.values())
        return self.out


def check() -> None:
    """Each way against the float64 inverse CDF at the kernel's own uniform (CPU or CUDA)."""
    dev = "cuda" if torch.cuda.is_available() and not INTERPRET else "cpu"
    g = torch.Generator().manual_seed(0)
    for rows, vocab, nc in ((3, 1000, 4), (2, 777, 8), (4, 300, 8), (2, 5000, 16)):
        logits = (torch.randn(rows, vocab, generator=g) * 4).to(dev)
        temp = torch.rand(rows, generator=g).to(dev) + 0.5
        seeds = torch.arange(rows, dtype=torch.int64, device=dev)
        ways = {}
        for phases in (1, 2):
            probe = ClusterProbe(logits, temp, seeds, nc, phases)
            ways[f"draw/{phases}"] = (probe, partial(probe.run, False))
            if not INTERPRET:
                ways[f"own/{phases}"] = (probe, partial(probe.run, True))
        for name, (probe, fn) in ways.items():
            for call in range(2):
                probe.seeds.copy_(torch.arange(rows) + 100 * call)
                probe.out.fill_(-1)
                tok = fn().long().cpu()
                ref = reference(logits.cpu(), temp.cpu(), probe.u.cpu())
                assert torch.equal(tok, ref), (name, rows, vocab, nc, tok, ref)
        print(f"rows={rows} V={vocab} NC={nc} (chunk {probe.block}): {', '.join(ways)} "
              "equal the reference")


WAYS = (("draw", 8, 1), ("draw", 16, 1), ("own", 8, 1), ("own", 16, 1), ("own", 16, 2),
        ("own", 16, 3))


def measure(sampler, rows: int, vocab: int, iters: int) -> str:
    """One size's line: onekernel_probe's `one` and `two_pdl` (tiles of 1024), each cluster
    way, and the sampler's temperature and issue mixes on the same logits."""
    from bench.sampler import MIX, case_inputs, make_batch, timed

    MIX[0] = "issue"
    _, _, first, batch, _ = case_inputs(rows, vocab, "cuda", scale=8.0)
    issue = timed(lambda: sampler.sample(first, batch), "cuda", iters)
    MIX[0] = "temperature"
    tbatch = make_batch(rows, vocab, 1, "cuda")
    temp_us = timed(lambda: sampler.sample(first, tbatch), "cuda", iters)
    temp = torch.full((rows,), 0.7, device="cuda")
    seeds = torch.arange(rows, dtype=torch.int64, device="cuda")
    base = Probe(first, temp, seeds, 1024)
    fns = [(base, base.one), (base, partial(base.two, pdl=True))]
    for kind, nc, phases in WAYS:
        probe = ClusterProbe(first, temp, seeds, nc, phases)
        fns.append((probe, partial(probe.run, kind == "own")))
    us = []
    for probe, fn in fns:
        tok = fn().long()  # each way is exact: check it at this size too
        bad = int((tok != reference(first, temp, probe.u)).sum())
        if bad:
            print(f"  B={rows} V={vocab} {fn}: {bad} rows differ (float32 sums against "
                  "float64)", file=sys.stderr)
        us.append(timed(fn, "cuda", iters))
    cells = " ".join(f"{t:7.1f}" for t in us)
    return f"{rows:>4} {vocab:>7} | {cells} | {temp_us:9.1f} {issue:10.1f}"


def bench(batches: list[int], vocabs: list[int], iters: int) -> None:
    from bench.sampler import Sampler

    sampler = Sampler("triton", "cuda")
    names = ["one", "two_pdl"] + [f"{k}{nc}/{p}" for k, nc, p in WAYS]
    print(f"device={torch.cuda.get_device_name()} (graph-replay medians, us; L2 evicted; "
          "cluster ways: kind, NC / meetings)")
    print(f"{'B':>4} {'V':>7} | {' '.join(f'{n:>7}' for n in names)} | "
          f"{'ours temp':>9} {'ours issue':>10}")
    for vocab in vocabs:
        for rows in batches:
            print(measure(sampler, rows, vocab, iters), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="correctness on small shapes only")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256])
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    check()
    if not args.check:
        bench(args.batch, args.vocab, args.iters)


if __name__ == "__main__":
    main()
