"""Probe (not a sampler): the tile kernel's candidates in Gluon, with warp-level ballots.

Runs 136-137 put ~16% of the tile kernel at verify B = 256, V = 262144 (69 of 431 us), and a
third of it at V = 32000, in the filtered rows' candidates branch: the per-row counts along
the lanes, the rows' mask and count reduced across warps, the slots and their stores. Plain
Triton chooses the tile's layout ([NW, 32] with 4 tokens a thread, 8 threads a row), so
per-row work is shuffles and the ranks a scan. Gluon lets the kernel choose its layout and
use `vote.ballot`:
- `_gl_tile_kernel`: a thread holds one lane of NW / warps consecutive 32-token rows, so a
  row is one register across the warp; a row's tokens above the threshold are one ballot
  (their count and each one's rank in the row a popcount), the rows' prefix a scan;
- `_gl_tile_kernel2`: the tile kernel's own layout; ballots 4 tokens a thread in one PTX
  block (`_PTX_RANK4`), every selected token stored at its rank; with COMMON (`k3`), as the
  tile kernel does, the rows' maxima take the slots by a popcount when no row holds two.
`_tri_stats_kernel` is the read and the stats alone in plain Triton, with the tile kernel's
steps added by knobs, to tell which of them costs the read.

This probe times, on the same logits, thresholds and flags, with graph replays and the L2
evicted (`bench.sampler.timed`):
- `tri`: the sampler's own `_tile_kernel` (its launch options), no patch, grammar or
  temperature: the read, the tile's max and mass, and the candidates of filtered rows;
- `gl`: a Gluon kernel doing the same, writing the same outputs (max, mass, argmax word,
  count, bound and the candidate pairs in id order) in the same buffers' formats;
- each with a share of rows filtered (`--shares`; 0: the read and the stats alone).
The outputs are compared (max, bound, count and the pairs exactly; mass to 1e-5).

Runs 164-171 (H200; `bench/NOTES-sampler.md`): every Gluon kernel's outputs equal the tile
kernel's. The first layout is slower everywhere (4-byte loads, 112 registers). The second
reads as fast as plain Triton, but its candidates cost more than the tile kernel's wherever
few tiles hold two tokens above the threshold in a row (V >= 128256, every row filtered,
1280 rows: 251 / 546 us against 203 / 390; COMMON 226 / 420-449): the ballots do not make the
candidates cheaper. The tile kernel's read at tiles of 1024 is ~20% slower than plain
Triton's because of `griddepcontrol.launch_dependents` (`stats,plaunch`), which the sampler
needs for its programmatic dependent launch.

    python bench/experiments/gluon_tile_probe.py [--rows 64 256 320 1280]
                                                 [--vocab 32000 128256 262144]
                                                 [--shares 0.4 1 0] [--tri-configs ...]
                                                 [--configs "k2,rp" ...]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

sys.path[0] = str(Path(__file__).resolve().parents[2])
from bench.sampler import timed  # noqa: E402
from sampler import triton_backend as tri  # noqa: E402
from sampler import triton_kernels as tk  # noqa: E402


@gluon.jit
def _ballot(sel):
    """Per element, the warp's mask of lanes whose element in the same register is set."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.u32 p, $1, 0; vote.sync.ballot.b32 $0, p, -1; }", "=r,r",
        [sel.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _popc(v):
    return gl.inline_asm_elementwise("popc.b32 $0, $1;", "=r,r", [v], dtype=gl.int32,
                                     is_pure=True, pack=1)


# the sampler's own helpers, compiled as Gluon functions (elementwise: no layout of their own)
_mass_exp = gluon.jit(tk._mass_exp.fn)
_add2 = gluon.jit(tk._add2.fn)


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _load_tile(x_ptr, offs, V, t, BLOCK_V: gl.constexpr):
    """Tile t's logits at x_ptr (ids offs) as float32, -inf past V (unmasked but in the
    row's last tile), as the tile kernel loads them."""
    if (t + 1) * BLOCK_V <= V:
        x = gl.load(x_ptr, eviction_policy="evict_first")
    else:
        x = gl.load(x_ptr, mask=offs < V, other=float("-inf"), eviction_policy="evict_first")
    return x.to(gl.float32)


@gluon.jit
def _store_stats(tmax_ptr, tsum_ptr, targ_ptr, o, m, s):
    """The tile's max, mass and (no greedy row here) argmax word."""
    gl.store(tmax_ptr + o, m)
    gl.store(tsum_ptr + o, s)
    gl.store(targ_ptr + o, 0)


@gluon.jit
def _gl_tile_kernel(logits_ptr, row_stride, V, K1, flags_ptr, thr_ptr, tmax_ptr, tsum_ptr,
                    targ_ptr, tcnt_ptr, tbnd_ptr, cpair_ptr, T_PAD: gl.constexpr,
                    C: gl.constexpr, BLOCK_V: gl.constexpr, WARPS: gl.constexpr,
                    VEC: gl.constexpr):
    """One program a (row, tile), as `_tile_kernel` (temperature 1, no patch or grammar):
    the tile's max and mass; in filtered rows with a token above the row's threshold, every
    such token as a pair (`tk._pair`) at its rank in the tile (id order), and their count.
    VEC: the tile loaded 4 tokens a thread (16-byte loads, 8 threads a row), then moved to
    the one-lane-a-token layout through shared memory."""
    NW: gl.constexpr = BLOCK_V // 32
    R: gl.constexpr = NW // WARPS
    L: gl.constexpr = gl.BlockedLayout([R, 1], [1, 32], [WARPS, 1], [1, 0])
    b = gl.program_id(0)
    j = gl.program_id(1)
    t = gl.program_id(2)
    n = b * K1 + j
    LV: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [WARPS, 1], [1, 0])
    LX: gl.constexpr = LV if VEC else L
    row = gl.arange(0, NW, layout=gl.SliceLayout(1, L))
    lane = gl.arange(0, 32, layout=gl.SliceLayout(0, L))
    offs = (t * NW + row)[:, None] * 32 + lane[None, :]
    flags = gl.load(flags_ptr + b)
    offs_x = ((t * NW + gl.arange(0, NW, layout=gl.SliceLayout(1, LX)))[:, None] * 32
              + gl.arange(0, 32, layout=gl.SliceLayout(0, LX))[None, :])
    x_ptr = logits_ptr + n.to(gl.int64) * row_stride + offs_x
    x = _load_tile(x_ptr, offs_x, V, t, BLOCK_V)
    if VEC:
        x = gl.convert_layout(x, L)
    thr = gl.load(thr_ptr + n)
    m = gl.max(gl.max(x, 0), 0)
    m0 = gl.where(m > float("-inf"), m, 0.0)
    s = gl.sum(gl.sum(_mass_exp(x - m0, 1.0), 0), 0)
    o = n.to(gl.int64) * T_PAD + t
    _store_stats(tmax_ptr, tsum_ptr, targ_ptr, o, m, s)
    if (flags & 1) != 0:
        if m > thr:
            sel = x > thr
            bal = _ballot(sel)
            crow = _popc(bal)  # the row's count, in every lane of it
            below = _popc(bal & ((gl.full([32], 1, gl.int32, gl.SliceLayout(0, L)) << lane) - 1)
                          [None, :])
            incl = gl.associative_scan(crow, 0, _add)
            rank = incl - crow + below
            pair = ((offs.to(gl.int64) << 32)
                    | (x.to(gl.int32, bitcast=True).to(gl.int64) & 0xFFFFFFFF))
            gl.store(cpair_ptr + o * C + rank, pair, mask=sel & (rank < C))
            n_sel = gl.max(gl.max(incl, 0), 0)
            gl.store(tcnt_ptr + o, n_sel)
        else:
            gl.store(tcnt_ptr + o, 0)
        gl.store(tbnd_ptr + o, gl.minimum(thr, m))


# A thread's 4 consecutive tokens of a 32-token row (inputs: their selection bits 0 / 1, the
# thread's lanes-before mask within its row's 8 lanes, the row's 8-lane mask): outputs each
# token's rank among the row's selected tokens, then the row's count (4 copies each).
_PTX_RANK4 = gl.constexpr("""{
.reg .pred q0, q1, q2, q3;
.reg .b32 b0, b1, b2, b3, t, s, u, c;
setp.ne.u32 q0, $8, 0;
setp.ne.u32 q1, $9, 0;
setp.ne.u32 q2, $10, 0;
setp.ne.u32 q3, $11, 0;
vote.sync.ballot.b32 b0, q0, -1;
vote.sync.ballot.b32 b1, q1, -1;
vote.sync.ballot.b32 b2, q2, -1;
vote.sync.ballot.b32 b3, q3, -1;
or.b32 t, b0, b1;
and.b32 t, b0, $12; popc.b32 s, t;
and.b32 t, b1, $12; popc.b32 u, t; add.u32 s, s, u;
and.b32 t, b2, $12; popc.b32 u, t; add.u32 s, s, u;
and.b32 t, b3, $12; popc.b32 u, t; add.u32 s, s, u;
mov.b32 $0, s; add.u32 s, s, $8;
mov.b32 $1, s; add.u32 s, s, $9;
mov.b32 $2, s; add.u32 s, s, $10;
mov.b32 $3, s;
and.b32 t, b0, $16; popc.b32 c, t;
and.b32 t, b1, $16; popc.b32 u, t; add.u32 c, c, u;
and.b32 t, b2, $16; popc.b32 u, t; add.u32 c, c, u;
and.b32 t, b3, $16; popc.b32 u, t; add.u32 c, c, u;
mov.b32 $4, c; mov.b32 $5, c; mov.b32 $6, c; mov.b32 $7, c;
}""")


@gluon.jit
def _popc64(v):
    return gl.inline_asm_elementwise("popc.b64 $0, $1;", "=r,l", [v], dtype=gl.int32,
                                     is_pure=True, pack=1)


@gluon.jit
def _rank_ballot(x, thr, offs, row, col, o, cpair_ptr, tcnt_ptr, C: gl.constexpr,
                 NW: gl.constexpr, WARPS: gl.constexpr, L: gl.constexpr):
    """Every token above thr at its rank in the tile (id order) and their count: a row's
    ranks by ballots, 4 tokens a thread in one PTX block (`_PTX_RANK4`), the rows' counts
    scanned over the rows in a 1-D layout."""
    sel = (x > thr).to(gl.int32)
    rw = (row % 4) * 8  # the row's first lane in its warp
    lane = rw[:, None] + (col // 4)[None, :]
    ltm = ((gl.full([NW, 32], 1, gl.int32, L) << lane) - 1) & (255 << rw)[:, None]
    grp = gl.full([NW, 32], 255, gl.int32, L) << rw[:, None]
    rin, crow = gl.inline_asm_elementwise(_PTX_RANK4, "=r,=r,=r,=r,=r,=r,=r,=r,"
                                          "r,r,r,r,r,r,r,r,r,r,r,r", [sel, ltm, grp],
                                          dtype=(gl.int32, gl.int32), is_pure=False, pack=4)
    # the rows' counts (equal along a row) to one a row, scanned in a 1-D layout
    L1: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    rcnt = gl.convert_layout(gl.max(crow, 1), L1)
    incl = gl.associative_scan(rcnt, 0, _add)
    rank = gl.convert_layout(incl - rcnt, gl.SliceLayout(1, L))[:, None] + rin
    # a pair as two 4-byte stores (value, then id: little-endian `tk._pair`)
    p32 = cpair_ptr.to(gl.pointer_type(gl.int32)) + (o * C + rank) * 2
    keep = (sel != 0) & (rank < C)
    gl.store(p32, x.to(gl.int32, bitcast=True), mask=keep)
    gl.store(p32 + 1, offs, mask=keep)
    gl.store(tcnt_ptr + o, gl.max(incl, 0))


@gluon.jit
def _gl_tile_kernel2(logits_ptr, row_stride, V, K1, flags_ptr, thr_ptr, tmax_ptr, tsum_ptr,
                     targ_ptr, tcnt_ptr, tbnd_ptr, cpair_ptr, T_PAD: gl.constexpr,
                     C: gl.constexpr, BLOCK_V: gl.constexpr, WARPS: gl.constexpr,
                     COMMON: gl.constexpr):
    """`_gl_tile_kernel` in the sampler's own layout (the one Triton picks for the tile: 4
    tokens a thread, 8 threads a 32-token row, 4 rows a warp): the load and the stats as
    there, the candidates by `_rank_ballot`. COMMON: as `_tile_kernel` does, the rows' maxima
    above thr take the slots by a popcount over the rows' mask when no row holds two, and
    only other tiles rank by ballots."""
    NW: gl.constexpr = BLOCK_V // 32
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [WARPS, 1], [1, 0])
    b = gl.program_id(0)
    j = gl.program_id(1)
    t = gl.program_id(2)
    n = b * K1 + j
    row = gl.arange(0, NW, layout=gl.SliceLayout(1, L))
    col = gl.arange(0, 32, layout=gl.SliceLayout(0, L))
    offs = (t * NW + row)[:, None] * 32 + col[None, :]
    flags = gl.load(flags_ptr + b)
    x_ptr = logits_ptr + n.to(gl.int64) * row_stride + offs
    x = _load_tile(x_ptr, offs, V, t, BLOCK_V)
    thr = gl.load(thr_ptr + n)
    rmax = gl.max(x, 1)
    m = gl.max(rmax, 0)
    m0 = gl.where(m > float("-inf"), m, 0.0)
    s = gl.sum(gl.sum(_mass_exp(x - m0, 1.0), 1), 0)
    o = n.to(gl.int64) * T_PAD + t
    _store_stats(tmax_ptr, tsum_ptr, targ_ptr, o, m, s)
    if (flags & 1) != 0:
        if m > thr:
            if COMMON:
                pk = gl.sum(gl.where(x > thr, 65536 + col[None, :], 0), 1)
                crow = pk >> 16
                over = crow > 0
                one = gl.full([NW], 1, gl.int64, gl.SliceLayout(1, L))
                rbit = gl.where(over, one << row.to(gl.int64), 0)
                rmask, n_sel = gl.reduce((rbit, crow), 0, _add2)
                if n_sel > _popc64(rmask):
                    _rank_ballot(x, thr, offs, row, col, o, cpair_ptr, tcnt_ptr, C, NW, WARPS,
                                 L)
                else:
                    slot = _popc64(rmask & ((one << row.to(gl.int64)) - 1))
                    rid = (t * NW + row) * 32 + (pk & 65535)
                    pair = ((rid.to(gl.int64) << 32)
                            | (rmax.to(gl.int32, bitcast=True).to(gl.int64) & 0xFFFFFFFF))
                    gl.store(cpair_ptr + o * C + slot, pair, mask=over & (slot < C))
                    gl.store(tcnt_ptr + o, n_sel)
            else:
                _rank_ballot(x, thr, offs, row, col, o, cpair_ptr, tcnt_ptr, C, NW, WARPS, L)
        else:
            gl.store(tcnt_ptr + o, 0)
        gl.store(tbnd_ptr + o, gl.minimum(thr, m))


@triton.jit
def _tri_stats_kernel(logits_ptr, row_stride, V, K1, temp_ptr, flags_ptr, thr_ptr, tmax_ptr,
                      tsum_ptr, targ_ptr, T_PAD: tl.constexpr, BLOCK_V: tl.constexpr,
                      TEMP: tl.constexpr, FLAT: tl.constexpr, PRIOR: tl.constexpr,
                      GREEDY: tl.constexpr, PWAIT: tl.constexpr = False,
                      PLAUNCH: tl.constexpr = False, PLATE: tl.constexpr = False):
    """The tile's max and mass alone in plain Triton, as `_gl_tile_kernel2` computes them
    (rows' maxima, then over the rows; the mass by rows, then over the rows), to tell what
    of the tile kernel's read at tiles of 1024 is Triton's and what its extra steps'. TEMP:
    the temperature loaded first and divided by where it is not 1, as the tile kernel does;
    FLAT: the mass summed over the tile as one 1-D tensor (the tile kernel's SUM_AT_MAX);
    PRIOR: `tk._after_prior` first, as the tile kernel without candidates or patch; GREEDY:
    the argmax in rows of temperature 0 (ARG_GREEDY), behind a runtime branch. PWAIT /
    PLAUNCH: griddepcontrol's wait / launch_dependents alone first; PLATE: `_after_prior`
    after the tile's load instead of first."""
    if PRIOR:
        tk._after_prior()
    if PWAIT:
        gdc_wait()
    if PLAUNCH:
        gdc_launch_dependents()
    NW: tl.constexpr = BLOCK_V // 32
    b = tl.program_id(0)
    j = tl.program_id(1)
    t = tl.program_id(2)
    n = b * K1 + j
    if TEMP or GREEDY:
        temp = tl.load(temp_ptr + b)
    flags = tl.load(flags_ptr + b)
    row = tl.arange(0, NW)
    offs = (t * NW + row)[:, None] * 32 + tl.arange(0, 32)[None, :]
    x = tk._tile_load(logits_ptr, row_stride, n, t, offs, V, BLOCK_V, "evict_first")
    if PLATE:
        tk._after_prior()
    thr = tl.load(thr_ptr + n)
    if TEMP:
        x = tk._tile_div(x, temp)
    rmax = tl.max(x, 1)
    arg = tl.full((), 0, tl.int32)
    if GREEDY:
        if temp == 0:
            m, arg = tk._max_arg(rmax, tk._row_lane(x, rmax, tl.arange(0, 32)), t * NW + row)
        else:
            m = tl.max(rmax, 0)
    else:
        m = tl.max(rmax, 0)
    m0 = tl.where(m > float("-inf"), m, 0.0)
    e = tk._mass_exp(x - m0, 1.0)
    if FLAT:
        s = tl.sum(tl.reshape(e, [BLOCK_V], can_reorder=True), 0)
    else:
        s = tl.sum(tl.sum(e, 1), 0)
    o = n.to(tl.int64) * T_PAD + t
    tl.store(tmax_ptr + o, m)
    tl.store(tsum_ptr + o, s + (flags & 0) + thr * 0.0)
    tl.store(targ_ptr + o, arg)


def inputs(rows: int, vocab: int, filtered: float, seed: int = 1) -> dict:
    """Logits randn * 8 (the benchmark's), each row's threshold below its ~200th largest value
    (where the pre kernel puts it: some 150-300 tokens above), flags 1 on a share of rows."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(rows, vocab, device="cuda", generator=g) * 8
    thr = torch.topk(logits, 200, dim=1).values[:, -1].contiguous()
    flags = (torch.arange(rows, device="cuda") % 5 < round(5 * filtered)).to(torch.int32)
    bv = tri.block_v(vocab)
    tiles = -(-vocab // bv)
    t_pad = tk.next_pow2(tiles)
    c = tri.slots(tiles)
    f32 = dict(dtype=torch.float32, device="cuda")
    out = dict(tmax=torch.empty(rows, t_pad, **f32), tsum=torch.empty(rows, t_pad, **f32),
               targ=torch.empty(rows, t_pad, dtype=torch.int32, device="cuda"),
               tcnt=torch.empty(rows, t_pad, dtype=torch.int32, device="cuda"),
               tbnd=torch.empty(rows, t_pad, **f32),
               cpair=torch.empty(rows, t_pad, c, dtype=torch.int64, device="cuda"))
    return dict(logits=logits, thr=thr, flags=flags, bv=bv, tiles=tiles, t_pad=t_pad, c=c,
                temp=torch.ones(rows, **f32), out=out)


def run_tri(a: dict, cfg: str = "") -> None:
    """cfg: comma-separated `nopdl` (launched without PDL), `nocand` (HAS_CAND off),
    `r<maxnreg>`; `stats` (`_tri_stats_kernel` instead, with `temp`, `flat`, `prior`,
    `greedy`, `pwait`, `plaunch`, `plate`: its knobs)."""
    o = a["out"]
    rows, vocab = a["logits"].shape
    opts = tri.kernel_options("_tile_kernel", block=a["bv"])
    cand = True
    parts = set(filter(None, cfg.split(",")))
    for part in parts:
        if part == "nopdl":
            opts.pop("launch_pdl", None)
        elif part == "nocand":
            cand = False
        elif part[0] == "r":
            opts["maxnreg"] = int(part[1:])
    if "stats" in parts:
        opts.pop("launch_pdl", None)
        _tri_stats_kernel[(rows, 1, a["tiles"])](
            a["logits"], vocab, vocab, 1, a["temp"], a["flags"], a["thr"], o["tmax"],
            o["tsum"], o["targ"], T_PAD=a["t_pad"], BLOCK_V=a["bv"], TEMP="temp" in parts,
            FLAT="flat" in parts, PRIOR="prior" in parts, GREEDY="greedy" in parts,
            PWAIT="pwait" in parts, PLAUNCH="plaunch" in parts, PLATE="plate" in parts, **opts)
        return
    tk._tile_kernel[(rows, 1, a["tiles"])](
        a["logits"], vocab, vocab, 1, a["temp"], a["flags"], a["flags"], 0, 0, a["flags"],
        a["temp"], (vocab + 31) // 32, a["thr"], o["tmax"], o["tsum"], o["targ"], o["tcnt"],
        o["tbnd"], o["cpair"], T_PAD=a["t_pad"], C=a["c"], BLOCK_V=a["bv"],
        HAS_GRAMMAR=False, HAS_PATCH=0, HAS_CAND=cand, SCAN=tri.tile_scan(vocab), **opts)


def run_gl(a: dict, cfg: str = "") -> None:
    """cfg: comma-separated `p<tokens a thread>` (default 16, as `tri.tile_warps`),
    `r<maxnreg>` (`rp`: the tile kernel's cap), `v` (VEC), `k2` (`_gl_tile_kernel2`), `k3`
    (the same with COMMON)."""
    o = a["out"]
    rows, vocab = a["logits"].shape
    warps = tri.tile_warps(a["bv"])
    opts: dict = {}
    vec = False
    kernel2 = False
    common = False
    for part in filter(None, cfg.split(",")):
        if part[0] == "p":
            warps = a["bv"] // int(part[1:]) // 32
        elif part == "rp":  # the tile kernel's own cap
            opts["maxnreg"] = tri.tile_maxnreg(a["bv"])
        elif part[0] == "r":
            opts["maxnreg"] = int(part[1:])
        elif part == "v":
            vec = True
        elif part == "k2":
            kernel2 = True
        elif part == "k3":
            kernel2 = common = True
    if kernel2:
        _gl_tile_kernel2[(rows, 1, a["tiles"])](
            a["logits"], vocab, vocab, 1, a["flags"], a["thr"], o["tmax"], o["tsum"],
            o["targ"], o["tcnt"], o["tbnd"], o["cpair"], T_PAD=a["t_pad"], C=a["c"],
            BLOCK_V=a["bv"], WARPS=warps, COMMON=common, num_warps=warps, **opts)
        return
    _gl_tile_kernel[(rows, 1, a["tiles"])](
        a["logits"], vocab, vocab, 1, a["flags"], a["thr"], o["tmax"], o["tsum"], o["targ"],
        o["tcnt"], o["tbnd"], o["cpair"], T_PAD=a["t_pad"], C=a["c"], BLOCK_V=a["bv"],
        WARPS=warps, VEC=vec, num_warps=warps, **opts)


def outputs(a: dict) -> dict:
    return {k: v.clone() for k, v in a["out"].items()}


def compare(a: dict, ref: dict, got: dict) -> str:
    """Where the two kernels' outputs differ (filtered rows' counts, bounds and pairs)."""
    tiles = a["tiles"]
    filt = a["flags"] != 0
    bad = []
    if not torch.equal(ref["tmax"][:, :tiles], got["tmax"][:, :tiles]):
        bad.append("tmax")
    rel = ((ref["tsum"][:, :tiles] - got["tsum"][:, :tiles]).abs()
           / ref["tsum"][:, :tiles]).max().item()
    if rel > 1e-5:
        bad.append(f"tsum {rel:.1e}")
    for key in ("tcnt", "tbnd"):
        if not torch.equal(ref[key][filt, :tiles], got[key][filt, :tiles]):
            bad.append(key)
    cnt = ref["tcnt"][filt, :tiles].clamp(max=a["c"])
    live = torch.arange(a["c"], device="cuda") < cnt[..., None]
    if not torch.equal(torch.where(live, ref["cpair"][filt, :tiles], 0),
                       torch.where(live, got["cpair"][filt, :tiles], 0)):
        bad.append("cpair")
    return ", ".join(bad) or "equal"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 256, 320, 1280])
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256, 262144])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--shares", type=float, nargs="+", default=[0.4, 1.0, 0.0],
                    help="shares of filtered rows")
    ap.add_argument("--tri-configs", nargs="*", default=[],
                    help="more tile kernel configs (`run_tri`), timed only")
    ap.add_argument("--configs", nargs="+", default=[""],
                    help="Gluon configs (`run_gl`), each checked against the tile kernel")
    args = ap.parse_args()
    print(f"{'rows':>5} {'V':>7} {'share':>5} | {'tri':>7}"
          + "".join(f" {'tri' + c:>11}" for c in args.tri_configs)
          + "".join(f" {'gl' + c:>9}" for c in args.configs) + " | check")
    for vocab in args.vocab:
        for rows in args.rows:
            for share in args.shares:
                a = inputs(rows, vocab, share)
                run_tri(a)
                ref = outputs(a)
                checks = []
                for cfg in args.configs:
                    for v in a["out"].values():
                        v.fill_(-7)
                    run_gl(a, cfg)
                    checks.append(compare(a, ref, outputs(a)))
                t_tri = [timed(partial(run_tri, a, c), "cuda", args.iters)
                         for c in ["", *args.tri_configs]]
                t_gl = [timed(partial(run_gl, a, c), "cuda", args.iters)
                        for c in args.configs]
                print(f"{rows:>5} {vocab:>7} {share:>5.1f} | {t_tri[0]:>7.1f}"
                      + "".join(f" {t:>11.1f}" for t in t_tri[1:])
                      + "".join(f" {t:>9.1f}" for t in t_gl)
                      + f" | {'; '.join(sorted(set(checks)))}", flush=True)


if __name__ == "__main__":
    main()
