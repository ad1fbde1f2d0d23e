"""What a thread-block cluster could save an exact sampler's chain of kernels (a probe; run 208:
nothing, bench/NOTES-sampler.md).

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

`filt`: exact top-k 50 then top-p 0.9 sampling in one cluster a row (`_filter_kernel`): the
threshold from the chunks' group maxima (meeting 1), the candidates at or above it, the last
CTA's sort and resolve (meeting 2). Set against the sampler's filters mix (top-k / top-p /
min-p, no penalty), whose pre kernel computes that threshold and whose finish resolves.

    TRITON_INTERPRET=1 python bench/experiments/cluster_probe.py --check   # CPU, small
    python bench/experiments/cluster_probe.py                              # CUDA table
The interpreter runs the programs one after another and has no cluster: each kernel's STAGE
splits it at its meetings into plain launches there (the scratch filled with garbage before
each call, so a read before its write fails the check). On CUDA every way is checked against
its float64 reference at every size as well.
"""

from __future__ import annotations

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
    cli,
    reference,
)
from sampler.triton_kernels import _key, _unkey  # noqa: E402

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
def _chunk(x_ptr, row_stride, V, inv_t_ptr, pid, NC: tl.constexpr, BLOCK: tl.constexpr):
    """Program pid's row r, chunk c, token ids and values x / t (-inf past V)."""
    r = pid // NC
    c = pid % NC
    offs = c * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r.to(tl.int64) * row_stride + offs, mask=offs < V,
                other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
    return r, c, offs, x * tl.load(inv_t_ptr + r)


@triton.jit
def _cluster_kernel(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, T, tmax_ptr, tsum_ptr, xch_ptr,
                    out_ptr, u_ptr, NC: tl.constexpr, BLOCK: tl.constexpr,
                    OWNER: tl.constexpr, PHASES: tl.constexpr, STAGE: tl.constexpr):
    """One CTA per (row, chunk): CTA c of row r is program r * NC + c. T: the chunks that
    hold tokens (the rest of a row's NC may lie past V). STAGE 0: the whole kernel, meetings
    at barrier.cluster (the GPU); 1 and 2: what comes before and after the meetings, as two
    plain launches (the interpreter, whose programs run one after another; its stage 2
    reloads the chunk)."""
    pid = tl.program_id(0)
    r, c, offs, x = _chunk(x_ptr, row_stride, V, inv_t_ptr, pid, NC, BLOCK)
    m = tl.max(x, 0)
    row_max = m
    n_prog = tl.num_programs(0)
    for p in tl.static_range(PHASES - 1):  # extra meetings: the row's max, exchanged
        if STAGE <= 1:
            tl.store(xch_ptr + p * n_prog + pid, m)
        if STAGE == 0:
            _arrive()
            _wait()
        if STAGE != 1:
            cc = tl.arange(0, NC)
            row_max = tl.maximum(row_max, tl.max(
                tl.load(xch_ptr + p * n_prog + r * NC + cc, mask=cc < T, other=float("-inf"),
                        cache_modifier=".cg"), 0))
    if STAGE <= 1:
        tl.store(tmax_ptr + pid, m)
        tl.store(tsum_ptr + pid, tl.sum(tl.exp(x - tl.where(m == float("-inf"), 0.0, m)), 0))
    if STAGE == 0:
        _arrive()
    if STAGE != 1:
        if OWNER:
            if STAGE == 0:
                _wait()
            tile, target, big, u = _pick(tmax_ptr, tsum_ptr, seed_ptr, r, T, NC)
            big = tl.maximum(big, row_max)  # (the same number: a meeting's result is used)
            if tile == c:
                tl.store(out_ptr + r, _token_in(tl.exp(x - big), tile, target, V, BLOCK))
                tl.store(u_ptr + r, u)
        elif c == NC - 1:
            if STAGE == 0:
                _wait()
            _draw(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, r, T, tmax_ptr, tsum_ptr, out_ptr,
                  u_ptr, NC, BLOCK)
            tl.store(xch_ptr + (PHASES - 1) * n_prog + pid, row_max)  # (the result used)


@triton.jit
def _top_store(g, ptr, R: tl.constexpr, G: tl.constexpr):
    """The R largest of g ([G]; ties by index) stored at ptr[rank], by a G x G count (no
    sort)."""
    gi = tl.arange(0, G)
    a = g[:, None]
    b = g[None, :]
    before = (b > a) | ((b == a) & (gi[None, :] < gi[:, None]))
    rank = tl.sum(before.to(tl.int32), 1)
    tl.store(ptr + rank, g, mask=rank < R)


@triton.jit
def _filter_kernel(x_ptr, row_stride, V, inv_t_ptr, seed_ptr, top_k, top_p, gmax_ptr, cval_ptr,
                   cid_ptr, ccnt_ptr, out_ptr, u_ptr, NC: tl.constexpr, BLOCK: tl.constexpr,
                   R: tl.constexpr, CAP: tl.constexpr, STAGE: tl.constexpr):
    """Exact top-k then top-p sampling (`filtered_reference`) in one cluster a row, top_k at
    most NC * R. CTA c: its chunk's R largest maxima of 32-token groups stored; meeting 1;
    every CTA takes the threshold L, the top_k-th largest of the row's NC * R stored maxima
    (top_k groups reach it, so at least top_k tokens do: the top-k set lies at or above L);
    the chunk's tokens at or above L stored in the row's CAP slots at an offset taken from
    the row's counter (an atomic add); meeting 2; the last CTA reads the count, zeroes the
    counter for the next call, sorts the slots and resolves top-k, top-p and the draw. A row
    with more than CAP such tokens (none on the benchmark's logits) gets token -2: the
    probe's stand-in for the sampler's exact path. STAGE as in `_cluster_kernel` (1, 2, 3:
    before, between and after the meetings)."""
    pid = tl.program_id(0)
    r, c, offs, x = _chunk(x_ptr, row_stride, V, inv_t_ptr, pid, NC, BLOCK)
    if STAGE <= 1:
        _top_store(tl.max(tl.reshape(x, (BLOCK // 32, 32)), 1), gmax_ptr + pid * R, R,
                   BLOCK // 32)
    if STAGE == 0:
        _arrive()
        _wait()
    if STAGE == 0 or STAGE == 2:
        allg = tl.load(gmax_ptr + r * NC * R + tl.arange(0, NC * R), cache_modifier=".cg")
        reach = tl.sum((allg[None, :] >= allg[:, None]).to(tl.int32), 1)
        thr = tl.max(tl.where(reach >= top_k, allg, float("-inf")), 0)
        sel = (x >= thr) & (offs < V)
        n_sel = tl.sum(sel.to(tl.int32), 0)
        pos = tl.atomic_add(ccnt_ptr + r, n_sel) + tl.cumsum(sel.to(tl.int32), 0) - 1
        ok = sel & (pos < CAP)
        tl.store(cval_ptr + r * CAP + pos, x, mask=ok)
        tl.store(cid_ptr + r * CAP + pos, offs, mask=ok)
    if STAGE == 0:
        _arrive()
    if (STAGE == 0 or STAGE == 3) and c == NC - 1:
        if STAGE == 0:
            _wait()
        n = tl.atomic_xchg(ccnt_ptr + r, 0)  # (read and zeroed for the next call)
        ss = tl.arange(0, CAP)
        live = ss < n
        v = tl.load(cval_ptr + r * CAP + ss, mask=live, other=float("-inf"),
                    cache_modifier=".cg")
        ids = tl.load(cid_ptr + r * CAP + ss, mask=live, other=0, cache_modifier=".cg")
        # descending by value, then ascending by id
        ks = tl.sort((_key(v).to(tl.int64) << 32) | (V - 1 - ids).to(tl.int64),
                     descending=True)
        vs = _unkey((ks >> 32).to(tl.int32))
        ids = V - 1 - (ks & 0xFFFFFFFF).to(tl.int32)
        vk = tl.max(tl.where(ss == top_k - 1, vs, float("-inf")), 0)
        w = tl.where((vs >= vk) & (vs > float("-inf")), tl.exp(vs - tl.max(vs, 0)), 0.0)
        cum = tl.cumsum(w, 0)
        w = tl.where(cum - w < top_p * tl.sum(w, 0), w, 0.0)
        u = tl.rand(tl.load(seed_ptr + r), r)
        target = u * tl.sum(w, 0)
        n_kept = tl.sum((w > 0).to(tl.int32), 0)
        idx = tl.minimum(tl.sum((tl.cumsum(w, 0) <= target).to(tl.int32), 0), n_kept - 1)
        tok = tl.sum(tl.where(ss == idx, ids, 0), 0)
        tl.store(out_ptr + r, tl.where(n > CAP, -2, tok))
        tl.store(u_ptr + r, u)


class FilterProbe:
    """Buffers for one (rows, vocab, NC) of `_filter_kernel`, launched as clusters."""

    def __init__(self, logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                 nc: int, top_k: int, top_p: float, cap: int = 128) -> None:
        rows, vocab = logits.shape
        self.r = max(1, 64 // nc)  # (the row's NC * R group maxima: 64)
        assert top_k <= nc * self.r, (top_k, nc, self.r)
        self.x, self.inv_t, self.seeds, self.nc = logits, 1.0 / temperature, seeds, nc
        self.top_k, self.top_p, self.cap = top_k, top_p, cap
        self.block = max(32 * self.r, triton.next_power_of_2(-(-vocab // nc)))
        dev = logits.device
        self.gmax = torch.empty(rows, nc * self.r, dtype=torch.float32, device=dev)
        self.cval = torch.empty(rows, cap, dtype=torch.float32, device=dev)
        self.cid = torch.empty(rows, cap, dtype=torch.int32, device=dev)
        self.ccnt = torch.zeros(rows, dtype=torch.int32, device=dev)
        self.out = torch.empty(rows, dtype=torch.int32, device=dev)
        self.u = torch.empty(rows, dtype=torch.float32, device=dev)
        self.launcher: tuple | None = None

    def scramble(self) -> None:
        """Garbage in the scratch (a check: no read may come before its write)."""
        for t in (self.gmax, self.cval):
            t.normal_()
        self.cid.random_(0, self.x.shape[1])

    def run(self) -> torch.Tensor:
        rows, vocab = self.x.shape
        args = (self.x, self.x.stride(0), vocab, self.inv_t, self.seeds, self.top_k,
                self.top_p, self.gmax, self.cval, self.cid, self.ccnt, self.out, self.u)
        consts = {"NC": self.nc, "BLOCK": self.block, "R": self.r, "CAP": self.cap}
        self.launcher = cluster_launch(_filter_kernel, rows, self.nc, args, consts,
                                       self.launcher, 3)
        return self.out


def filtered_reference(logits: torch.Tensor, temperature: torch.Tensor, top_k: int,
                       top_p: float, u: torch.Tensor) -> torch.Tensor:
    """`_filter_kernel`'s token in float64: the values x / t (float32, as the kernel scales
    them) in descending order, ties by ascending id; those at or above the top_k-th largest
    kept; of them, each whose preceding mass is below top_p of theirs kept; the inverse CDF at
    u over what is kept, in that order."""
    x = (logits.float() * (1.0 / temperature.float())[:, None]).double()
    vs, ids = torch.sort(x, dim=-1, descending=True, stable=True)  # (stable: ties by id)
    vk = vs[:, top_k - 1:top_k]
    w = torch.where(vs >= vk, torch.exp(vs - vs[:, :1]), 0.0)
    w = torch.where(torch.cumsum(w, -1) - w < top_p * w.sum(-1, keepdim=True), w, 0.0)
    below = torch.cumsum(w, -1) <= u.double()[:, None] * w.sum(-1, keepdim=True)
    idx = torch.minimum(below.sum(-1), (w > 0).sum(-1) - 1)
    return ids.gather(-1, idx[:, None])[:, 0]


class ClusterProbe:
    """Buffers for one (rows, vocab, NC, PHASES), and the kernel launched as clusters."""

    def __init__(self, logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                 nc: int, phases: int = 1) -> None:
        self.x, self.inv_t, self.seeds = logits, 1.0 / temperature, seeds
        self.nc, self.phases = nc, phases
        rows, vocab = logits.shape
        self.block = triton.next_power_of_2(-(-vocab // nc))
        self.live = -(-vocab // self.block)
        dev = logits.device
        self.tmax = torch.empty(rows, nc, dtype=torch.float32, device=dev)
        self.tsum = torch.empty_like(self.tmax)
        self.xch = torch.empty(phases, rows, nc, dtype=torch.float32, device=dev)
        self.out = torch.empty(rows, dtype=torch.int32, device=dev)
        self.u = torch.empty(rows, dtype=torch.float32, device=dev)
        self.launchers: dict[bool, tuple | None] = {}

    def scramble(self) -> None:
        """Garbage in the scratch (a check: no read may come before its write)."""
        for t in (self.tmax, self.tsum, self.xch):
            t.normal_()

    def run(self, owner: bool) -> torch.Tensor:
        rows, vocab = self.x.shape
        args = (self.x, self.x.stride(0), vocab, self.inv_t, self.seeds, self.live, self.tmax,
                self.tsum, self.xch, self.out, self.u)
        consts = {"NC": self.nc, "BLOCK": self.block, "OWNER": owner, "PHASES": self.phases}
        self.launchers[owner] = cluster_launch(_cluster_kernel, rows, self.nc, args, consts,
                                               self.launchers.get(owner), 2)
        return self.out


def cluster_launch(kernel, rows: int, nc: int, args: tuple, consts: dict,
                   cached: tuple | None, stages: int) -> tuple | None:
    """kernel on rows * nc CTAs, each row's nc CTAs a cluster (STAGE 0); returns what the
    next launch of the same arguments passes as `cached`. The kernel is compiled for one CTA
    and launched by Triton's own launcher with num_ctas = nc in its packed metadata (grid x nc
    CTAs, cluster dimension nc; 16 is allowed as non-portable). The interpreter launches
    STAGE 1 to `stages` as plain grids instead. Warps: one per 512 tokens of the chunk
    (consts' BLOCK), 4 to 16."""
    warps = min(16, max(4, consts["BLOCK"] // 512))
    if INTERPRET:
        for stage in range(1, stages + 1):
            kernel[(rows * nc,)](*args, **consts, STAGE=stage, num_warps=warps)
        return None
    consts = {**consts, "STAGE": 0}
    if cached is None:
        compiled = kernel.warmup(*args, **consts, num_warps=warps, grid=(rows * nc,))
        if hasattr(compiled, "result"):  # (an asynchronous compile's future)
            compiled = compiled.result()
        run = compiled.run  # (loads the module: compiled.function is set from here on)
        cached = (run, compiled.function,
                  (compiled.metadata.num_warps, nc, compiled.metadata.shared))
    run, function, packed = cached
    run(rows, 1, 1, torch.cuda.current_stream().cuda_stream, function, packed, None, None,
        None, *args, *consts.values())
    return cached


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
            ways[f"own/{phases}"] = (probe, partial(probe.run, True))
        for name, (probe, fn) in ways.items():
            for call in range(2):
                probe.seeds.copy_(torch.arange(rows) + 100 * call)
                probe.out.fill_(-1)
                probe.scramble()
                try:
                    tok = fn().long().cpu()
                except RuntimeError as err:  # (a cluster that cannot be launched)
                    print(f"  {name} NC={nc}: {str(err)[:200]}", file=sys.stderr)
                    break
                ref = reference(logits.cpu(), temp.cpu(), probe.u.cpu())
                assert torch.equal(tok, ref), (name, rows, vocab, nc, tok, ref)
        top_k = 6  # (few groups a chunk at these sizes: a larger top-k overflows the slots)
        filt = FilterProbe(logits, temp, seeds, nc, top_k, 0.8)
        for call in range(2):
            filt.seeds.copy_(torch.arange(rows) + 100 * call)
            filt.scramble()
            try:
                tok = filt.run().long().cpu()
            except RuntimeError as err:  # (a cluster that cannot be launched)
                print(f"  filter NC={nc}: {str(err)[:200]}", file=sys.stderr)
                break
            ref = filtered_reference(logits.cpu(), temp.cpu(), top_k, 0.8, filt.u.cpu())
            assert torch.equal(tok, ref), ("filter", rows, vocab, nc, tok, ref)
        print(f"rows={rows} V={vocab} NC={nc} (chunk {probe.block}): {', '.join(ways)} and "
              f"filter (top-k {top_k}, top-p 0.8) equal their references")


WAYS = (("draw", 8, 1), ("draw", 16, 1), ("own", 8, 1), ("own", 16, 1), ("own", 16, 2),
        ("own", 16, 3))


FILTER = (50, 0.9)  # the filter probe's top-k and top-p (temperature 0.7)


def measure(sampler, rows: int, vocab: int, iters: int) -> str:
    """One size's line: onekernel_probe's `one` and `two_pdl` (tiles of 1024), each cluster
    way, the filter probe at NC 8 and 16, and the sampler's temperature, filters and issue
    mixes on the same logits."""
    from bench.sampler import MIX, case_inputs, make_batch, timed

    _, _, first, _, _ = case_inputs(rows, vocab, "cuda", scale=8.0)
    ours = []
    for mix in ("temperature", "filters", "issue"):  # (the same logits, each mix's rows)
        MIX[0] = mix
        batch = make_batch(rows, vocab, 1, "cuda")
        ours.append(timed(lambda: sampler.sample(first, batch), "cuda", iters))  # noqa: B023
    temp = torch.full((rows,), 0.7, device="cuda")
    seeds = torch.arange(rows, dtype=torch.int64, device="cuda")
    base = Probe(first, temp, seeds, 1024)
    fns = [("one", base, base.one, reference),
           ("two_pdl", base, partial(base.two, pdl=True), reference)]
    for kind, nc, phases in WAYS:
        probe = ClusterProbe(first, temp, seeds, nc, phases)
        fns.append((f"{kind}{nc}/{phases}", probe, partial(probe.run, kind == "own"),
                    reference))
    for nc in (8, 16):
        probe = FilterProbe(first, temp, seeds, nc, *FILTER)
        fns.append((f"filt{nc}", probe, probe.run,
                    partial(filtered_reference, top_k=FILTER[0], top_p=FILTER[1])))
    us = []
    for name, probe, fn, ref in fns:
        try:
            tok = fn().long()  # each way is exact: check it at this size too
        except RuntimeError as err:  # (a cluster that cannot be launched: reported, not fatal)
            print(f"  B={rows} V={vocab} {name}: {str(err)[:200]}", file=sys.stderr)
            us.append(float("nan"))
            continue
        bad = int((tok != ref(first, temp, u=probe.u)).sum())
        if bad:
            print(f"  B={rows} V={vocab} {name}: {bad} rows differ (float32 sums against "
                  f"float64; -2 tokens: {int((tok == -2).sum())}, the rows whose slots "
                  "overflowed)", file=sys.stderr)
        us.append(timed(fn, "cuda", iters))
    cells = " ".join(f"{t:7.1f}" for t in us + ours)
    return f"{rows:>4} {vocab:>7} | {cells}"


def bench(batches: list[int], vocabs: list[int], iters: int) -> None:
    from bench.sampler import Sampler

    sampler = Sampler("triton", "cuda")
    names = (["one", "two_pdl"] + [f"{k}{nc}/{p}" for k, nc, p in WAYS]
             + ["filt8", "filt16", "o_temp", "o_filt", "o_issue"])  # (measure's order)
    print(f"device={torch.cuda.get_device_name()} (graph-replay medians, us; L2 evicted; "
          "cluster ways: kind, NC / meetings; filt: top-k 50, top-p 0.9, NC; o_*: the "
          "sampler's mixes)")
    print(f"{'B':>4} {'V':>7} | {' '.join(f'{n:>7}' for n in names)}")
    for vocab in vocabs:
        for rows in batches:
            print(measure(sampler, rows, vocab, iters), flush=True)


if __name__ == "__main__":
    cli(__doc__, check, bench)
