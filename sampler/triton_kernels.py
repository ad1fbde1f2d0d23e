"""Triton kernels of the fused sampler (the launch sequence lives in `triton_backend`).

Rows: one per (request b, position j), n = b * K1 + j (K1 = 1 for `sample`, K+1 for
`verify`); per-request settings are read at b. Every kernel takes the row count from its grid
(never a constexpr), so one compilation serves every batch size; constexprs depend only on V,
K and the dtype. Processed values are recomputed on the fly from the logits by `_processed`
(grammar bit, sparse penalty/bias patch, temperature): no [B, V] processed tensor is written.

Sparse patch: tokens touched by history, logit bias or earlier drafts get a bit in `bits`
[N, ceil(V/32)] (zeroed per call by the row's patch program) and, at those ids only, their
penalised and biased logit in `pval` [N, V] (allocated, but touched only at the patched ids).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from sampler import _triton_interpret

_triton_interpret.install()

SEEN = 1 << 20
KEY_MIN = -(1 << 63)
# Bit-exact float32 arithmetic of the processing, as torch does it: libdevice expf (torch.exp's
# CUDA implementation; tl.exp is ex2.approx(x * log2 e), off by several ulp for large |x|)
# and IEEE division (Triton's `/` on float32 is div.full, 2 ulp). The interpreter has no
# libdevice: plain `/` (numpy's is IEEE) and tl.exp, which `_triton_interpret` routes through
# torch.exp (numpy's float32 exp is not torch's CPU exp). SONICSPEC_FAST_MATH=1 restores
# the approximate versions (measurement only).
_FAST = os.environ.get("SONICSPEC_FAST_MATH") == "1"
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# (Chosen at import, not with constexpr globals: the interpreter re-reads a helper that
# branches on a global at every call and grows to tens of GB.)
if INTERPRET or _FAST:

    @triton.jit
    def _exp(x):
        return tl.exp(x)

    @triton.jit
    def _div(a, b):
        return a / b

else:

    @triton.jit
    def _exp(x):
        return libdevice.exp(x)

    @triton.jit
    def _div(a, b):
        return tl.math.div_rn(a, b)


if INTERPRET:  # (griddepcontrol is inline PTX: the interpreter cannot run it)

    @triton.jit
    def _after_prior(RELEASE_LATE: tl.constexpr = False, LAST: tl.constexpr = 0):
        pass

else:

    @triton.jit
    def _after_prior(RELEASE_LATE: tl.constexpr = False, LAST: tl.constexpr = 0):
        """Programmatic dependent launch: let the next kernel of the sequence launch now
        (its programs wait for this grid to finish before reading what it writes), then wait
        for the previous grid to finish and its writes to be visible. Kernels launched with
        `launch_pdl` call it before any load of an earlier kernel's output, and before any
        store at all: until the wait, the previous grid may still run, and scratch of its
        that the host's allocator has already handed out again (`triton_backend._run` keeps
        every buffer of the sequence for the whole call) must not be written under it
        (bench/NOTES-sampler.md, run 103; the finish's STAMP readings, a measurement, write
        their own buffer before it). A no-op without PDL.

        RELEASE_LATE (the pre kernel): wait first, then let the next kernel launch. Every
        program of this grid has then seen the previous grid finish, so the next kernel (the
        tile kernel) starts only after whatever wrote the logits has finished, and may read
        the logits before its own wait, while this grid drains.

        LAST > 0: only the grid's last LAST programs in launch order (x fastest) let the next
        kernel launch; the others let it by exiting. The next kernel launches once every
        program has done one or the other, so with LAST at least a wave of resident programs
        it launches as early as before, while most programs of a large grid skip the
        instruction: on an H200 it costs a grid of small programs ~20% of its read (tiles of
        1024 on 2 warps, 1280 rows at V = 128256: 165 -> 199 us; bench/NOTES-sampler.md,
        runs 169-171, 174). The tile kernel's TRIGGER_LAST (`triton_backend.tile_trigger_last`)."""
        if RELEASE_LATE:
            gdc_wait()
            gdc_launch_dependents()
        else:
            if LAST > 0:
                n0 = tl.num_programs(0)
                n01 = n0 * tl.num_programs(1)
                lin = (tl.program_id(0) + n0 * tl.program_id(1)
                       + n01 * tl.program_id(2).to(tl.int64))
                if lin >= n01 * tl.num_programs(2).to(tl.int64) - LAST:
                    gdc_launch_dependents()
            else:
                gdc_launch_dependents()
            gdc_wait()


if INTERPRET:

    @triton.jit
    def _tdiv(x, rcp, t):
        return x / t

    @triton.jit
    def _mass_exp(x, scale):
        return tl.exp(x * scale)

else:

    @triton.jit
    def _tdiv(x, rcp, t):
        """x / t correctly rounded, as torch divides, from rcp = RN(1 / t) (computed once per
        program): Markstein's last step q1 = RN(q0 + r rcp) with q0 = RN(x rcp) and the
        residual r = x - t q0 exact by FMA. Three instructions a token instead of the ~10 of
        div.rn's fast path. Exact for normal t in [2^-20, 2^20] (the caller checks) and
        |x| in [2^-100, 2^100] or 0 (the residual neither underflows nor overflows: any
        logit). An infinite x comes back as it is (its residual is NaN)."""
        q0 = x * rcp
        e = tl.fma(q0, -t, x)  # (the negation on the scalar t: no instruction a token)
        return tl.where(e != e, x, tl.fma(e, rcp, q0))

    @triton.jit
    def _mass_exp(x, scale):
        """exp(x scale) for the tile masses (scale a scalar: 1, or 1 / temperature where the
        tile kernel leaves its tokens undivided): ex2.approx.ftz(x (scale log2 e)), one
        MUFU.EX2 after the multiply. tl.exp's ex2.approx without ftz adds a compare and two
        predicated multiplies a token for results below 2^-126 (which ftz flushes to 0:
        nothing that a tile's sum of terms >= 1 could show); every other result is the same
        number."""
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f",
                                         [x * (scale * 1.4426950408889634)],
                                         dtype=tl.float32, is_pure=True, pack=1)


# Predicated elementwise stores by inline PTX ($1 the address, $2 the value, $3 the mask): in
# the values' own layout, where tl.store would first convert pointers, values and masks to a
# scattered layout through shared memory (TTGIR).
_PTX_ST_B32 = tl.constexpr("{ .reg .pred p; setp.ne.u32 p, $3, 0; @p st.global.b32 [$1], $2; "
                           "mov.u32 $0, 0; }")
_PTX_ST_B64 = tl.constexpr("{ .reg .pred p; setp.ne.u32 p, $3, 0; @p st.global.b64 [$1], $2; "
                           "mov.u32 $0, 0; }")


@triton.jit
def _ptx_masked(ptr, val, mask, PTX: tl.constexpr, CONSTRAINTS: tl.constexpr):
    """`PTX` (one of the _PTX_* ops) at each element where mask holds (GPU only)."""
    tl.inline_asm_elementwise(PTX, CONSTRAINTS, [ptr, val, mask.to(tl.int32)], dtype=tl.int32,
                              is_pure=False, pack=1)


# Inline-PTX stores (the defaults; the interpreter always takes tl.store). "0" restores
# tl.store (measurement; a CI test compiles each variant).
ASM_STORE = tl.constexpr(not INTERPRET and os.environ.get("SONICSPEC_ASM_STORE", "1") == "1")
ASM_SCATTER = tl.constexpr(not INTERPRET
                           and os.environ.get("SONICSPEC_ASM_SCATTER", "1") == "1")


@triton.jit
def _store_rows(ptr, val, mask):
    """tl.store of 32- or 64-bit values, by inline PTX under ASM_STORE: the tile kernel's per-row
    results (a reduction's layout: each value replicated on the lanes of its row; the
    replicas store the same word) need no conversion to the store's coalesced layout (three
    in its common candidate path, six barriers). Run 19 (H200): sample B = 256, V = 262144
    163 -> 160 us, verify 772 -> 756 us; no change at small B."""
    if ASM_STORE:
        if val.dtype == tl.int64:
            _ptx_masked(ptr, val, mask, _PTX_ST_B64, "=r,l,l,r")
        else:
            _ptx_masked(ptr, val.to(tl.int32, bitcast=True), mask, _PTX_ST_B32, "=r,l,r,r")
    else:
        tl.store(ptr, val, mask=mask)


@triton.jit
def _scatter64(ptr, val, mask):
    """tl.store of int64 values, by inline PTX under ASM_SCATTER. The finish's compaction
    stores its survivors this way: with tl.store the compiler converted the flags, the pairs
    and the mask to a scattered layout and ran the 2048-slot scan twice, once in each layout
    (TTGIR, run 26; run 27: sample V = 128256, B = 1 23 -> 21 us)."""
    if ASM_SCATTER:
        _ptx_masked(ptr, val, mask, _PTX_ST_B64, "=r,l,l,r")
    else:
        tl.store(ptr, val, mask=mask)


if INTERPRET:  # the interpreter's vector atomics do not hand out distinct slots

    @triton.jit
    def _compact(cpair_ptr, cnt_ptr, o, x, offs, sel, base, total,
                 C: tl.constexpr, N: tl.constexpr):
        """Write the selected (value, id) pairs to the tile's slots from `base` on, in id
        order, and the tile's count `total` (= base + the number selected)."""
        sel1 = tl.reshape(sel, [N])
        pos = base + tl.cumsum(sel1.to(tl.int32), 0) - 1
        tl.store(cpair_ptr + o * C + pos, tl.reshape(_pair(x, offs), [N]),
                 mask=sel1 & (pos < C))
        tl.store(cnt_ptr + o, total)

else:

    @triton.jit
    def _compact(cpair_ptr, cnt_ptr, o, x, offs, sel, base, total,
                 C: tl.constexpr, N: tl.constexpr):
        """Write the selected (value, id) pairs to the tile's slots from `base` on: each
        takes a slot from an atomic counter (the tile's count word, zeroed here first: it
        is this program's alone), so the order is arbitrary and the row stage sorts by id;
        no prefix sum over the tile. Then, once every thread's atomics are done (a
        barrier), the tile's count `total`."""
        tl.store(cnt_ptr + o, 0)
        tl.debug_barrier()
        slot = base + tl.atomic_add(cnt_ptr + o + tl.zeros_like(offs),
                                    tl.full(offs.shape, 1, tl.int32), mask=sel, sem="relaxed")
        tl.store(cpair_ptr + o * C + slot, _pair(x, offs), mask=sel & (slot < C))
        tl.debug_barrier()
        tl.store(cnt_ptr + o, total)


if INTERPRET:

    @triton.jit
    def _popc64(x):
        """Set bits of int64 x (SWAR: the interpreter has no libdevice)."""
        u = x.to(tl.uint64, bitcast=True)
        u = u - ((u >> 1) & 0x5555555555555555)
        u = (u & 0x3333333333333333) + ((u >> 2) & 0x3333333333333333)
        u = (u + (u >> 4)) & 0x0F0F0F0F0F0F0F0F
        return ((u * 0x0101010101010101) >> 56).to(tl.int32)

else:

    @triton.jit
    def _popc64(x):
        return libdevice.popc(x)


# A candidate slot: its id in the high 32 bits, its float32 value's bits in the low ones (one
# 8-byte store a slot in the tile kernel, one load in the finish, which sorts and scatters
# the same pairs); NO_PAIR is (0, -inf).
NO_PAIR = tl.constexpr(0xFF800000)


@triton.jit
def _pair(v, i):
    """The candidate slot of value v (float32) at id i."""
    return (i.to(tl.int64) << 32) | (v.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)


@triton.jit
def _store_pair(ptr, v, i, mask, WIDE: tl.constexpr):
    """Candidate slots at ptr (int64 pairs, `_pair`) for values v at ids i, by `_store_rows`:
    WIDE as one 8-byte store each, else as two 4-byte ones (value, then id: little-endian),
    which hold no register pairs (the rank stores' many values)."""
    if WIDE:
        _store_rows(ptr, _pair(v, i), mask)
    else:
        p32 = ptr.to(tl.pointer_type(tl.int32))
        _store_rows(p32, v.to(tl.int32, bitcast=True), mask)
        _store_rows(p32 + 1, i, mask)


@triton.jit
def _pair_value(p):
    """The float32 value of candidate slots p (`_pair`)."""
    return (p & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _pair_id(p):
    """The id of candidate slots p (`_pair`)."""
    return (p >> 32).to(tl.int32)


@triton.jit
def _pair_unpack(p, live):
    """The values and ids of candidate slots p where live; -inf and 0 elsewhere."""
    return tl.where(live, _pair_value(p), float("-inf")), tl.where(live, _pair_id(p), 0)


@triton.jit
def _add2(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _mix32(x):
    """lowbias32 on uint32 (wrapping multiplies), as sampler.rng.mix32."""
    x = x ^ (x >> 16)
    x = x * tl.full((), 0x7FEB352D, tl.uint32)
    x = x ^ (x >> 15)
    x = x * tl.full((), 0x846CA68B, tl.uint32)
    return x ^ (x >> 16)


@triton.jit
def _uniform(seed, pos, stream: tl.constexpr):
    """uniform(seed, pos, stream) of sampler.rng: ((h >> 9) + 0.5) * 2**-23."""
    if stream == 0:
        salt = tl.full((), 0x9E3779B1, tl.uint32)
    elif stream == 1:
        salt = tl.full((), 0x85EBCA77, tl.uint32)
    else:
        salt = tl.full((), 0xC2B2AE3D, tl.uint32)
    h = _mix32(seed.to(tl.uint32) ^ salt)
    h = _mix32(h ^ (seed >> 32).to(tl.uint32))
    h = _mix32(h ^ pos.to(tl.uint32))
    return ((h >> 9).to(tl.float32) + 0.5) * 1.1920928955078125e-07


@triton.jit
def _filtered(temp_raw, k, top_p, min_p):
    """A sampled (not greedy) row with top-k, top-p or min-p: it needs candidates."""
    return (temp_raw != 0) & ((k > 0) | (top_p < 1) | (min_p > 0))


@triton.jit
def _key(x):
    """Order-preserving int32 key of float32 x (-0.0 treated as +0.0)."""
    bits = (x + 0.0).to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@triton.jit
def _unkey(k):
    bits = tl.where(k >= 0, k, k ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _pval_at(pval_ptr, n, b, j, K1, V, ids, HAS_PATCH: tl.constexpr):
    """Address of the patch value of row n = request b, position j, at ids. HAS_PATCH is the layout
    of pval (`triton_backend.patch_mode`): 1 [N, V], a row's values together; 2 [B, V, K + 1],
    a request's K + 1 rows side by side at each id (one 32-byte sector holds an id's values
    for every position: verify's scattered patch stores touch 1/(K + 1) as many sectors)."""
    if HAS_PATCH == 2:
        return pval_ptr + (b.to(tl.int64) * V * K1 + j) + ids * K1
    else:
        return pval_ptr + n.to(tl.int64) * V + ids


@triton.jit
def _processed(logits_ptr, n, b, j, K1, offs, V, row_stride, temp,
               gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W,
               HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """Processed, temperature-scaled float32 logits of row n at token ids offs (-inf outside
    [0, V)): grammar -> repetition -> frequency/presence -> bias -> / temp (1 for greedy).
    Penalties and bias come precomputed at the patched ids (`_patch_req`), so a token
    costs one bit test here; the grammar mask is applied after the patch, which is the
    same (a masked token stays -inf through the penalties)."""
    inb = (offs < V) & (offs >= 0)
    x = tl.load(logits_ptr + n.to(tl.int64) * row_stride + offs, mask=inb,
                other=float("-inf")).to(tl.float32)
    if HAS_PATCH:
        pw = tl.load(bits_ptr + b.to(tl.int64) * W + offs // 32, mask=inb, other=0)
        hit = inb & (((pw >> (offs % 32)) & 1) != 0)
        x = tl.where(hit, tl.load(_pval_at(pval_ptr, n, b, j, K1, V, offs, HAS_PATCH), mask=hit,
                                 other=0.0),
                     x)
    if HAS_GRAMMAR:
        word = tl.load(gmask_ptr + b.to(tl.int64) * g_sb + j * g_sj + offs // 32, mask=inb,
                       other=-1)
        ok = ((word >> (offs % 32)) & 1) != 0
        x = tl.where(ok | (has_g == 0), x, float("-inf"))
    x = _div(x, temp)
    return tl.where(inb, x, float("-inf"))


@triton.jit
def _keep(x, x_lo, m0, s_a, pthr, minp):
    """Kept by top-k/top-p/min-p given the row's thresholds (see `_row_kernel`)."""
    e = _exp(x - m0)
    return (x > float("-inf")) & (x >= x_lo) & (_div(e, s_a) >= pthr) & (e >= minp)


@triton.jit
def _gather(logits_ptr, row0, row_stride, jj, K1, ids, ok):
    """The logits at ids in rows row0 + jj (jj [POS, 1]: positions below K1), float32."""
    live = ok[None, :] & (jj < K1)
    x = tl.load(logits_ptr + (row0 + jj) * row_stride + ids[None, :], mask=live, other=0.0)
    return x.to(tl.float32)


@triton.jit
def _write_patch(x, b, jj, K1, ids, ok, seen, cnt, bv, rep, freq, pres, pval_ptr, V,
                 bits_row, set_bits, LAYOUT: tl.constexpr):
    """Store the penalised, biased logit (before temperature) for the logits x at ids in request
    b's rows at positions jj (seen, cnt and bv per position and id), in torch's order of
    operations, and, when set_bits, set the ids' bits: repetition if seen, - freq * generated
    count, - presence if generated, + bias."""
    live = ok[None, :] & (jj < K1)
    c = cnt.to(tl.float32)
    y = tl.where(seen, tl.where(x > 0, _div(x, rep), x * rep), x)
    y = y - freq * c
    y = y - pres * (c > 0).to(tl.float32)
    tl.store(_pval_at(pval_ptr, b.to(tl.int64) * K1 + jj, b, jj, K1, V, ids[None, :], LAYOUT),
             y + bv, mask=live)
    # relaxed: only later kernels read the bits (Triton's default, acq_rel, fences each)
    tl.atomic_or(bits_row + ids // 32, (1 << (ids % 32)).to(tl.int32), mask=ok & set_bits,
                 sem="relaxed")


@triton.jit
def _earlier(ids, jj, xd, xd_ok, kb):
    """[POS, len(ids)]: per position jj ([POS, 1]) and id, how many of the request's
    valid drafts xd (xd_ok; their indices kb) before that position equal it."""
    eq = ((ids[None, :, None] == xd[None, None, :]) & xd_ok[None, None, :]
          & (kb[None, None, :] < jj[:, :, None]))
    return tl.sum(eq.to(tl.int32), 2)


@triton.jit
def _hist_terms(ids, cnt, V, jj, xd, xd_ok, kb, bids, bval, bias_ids_ptr, bias_val_ptr, b,
                bias_cap, HAS_BIAS: tl.constexpr, BIAS_CHUNK: tl.constexpr):
    """A chunk of request b's history (ids and output counts cnt, loaded): which entries are
    tokens, their generated counts per position ([POS, len]: output count + equal earlier
    drafts) and their logit bias."""
    ok = (ids >= 0) & (ids < V)
    c = tl.where(ok, cnt, 0)[None, :] + _earlier(ids, jj, xd, xd_ok, kb)
    bv = tl.zeros(ids.shape, tl.float32)
    if HAS_BIAS:
        bv = _bias_for(ids, bids, bval, bias_ids_ptr, bias_val_ptr, b, bias_cap, BIAS_CHUNK)
    return ok, c, bv


@triton.jit
def _list_at(ptr, b, cap, h, other):
    """Entries h of request b's row of a [B, cap] list (`other` past cap)."""
    return tl.load(ptr + b.to(tl.int64) * cap + h, mask=h < cap, other=other)


@triton.jit
def _found(ids, lst):
    """Per id, whether the (loaded, -1 padded) list holds it."""
    return tl.sum(((ids[:, None] == lst[None, :]) & (lst[None, :] >= 0)).to(tl.int32), 1) > 0


@triton.jit
def _bias_in(ids, bids, bval):
    """Per id, its logit bias among the loaded entries bids / bval (bias ids are unique)."""
    return tl.sum(tl.where((ids[:, None] == bids[None, :]) & (bids[None, :] >= 0),
                           bval[None, :], 0.0), 1)


@triton.jit
def _bias_for(ids, bids, bval, bias_ids_ptr, bias_val_ptr, b, bias_cap, BLOCK_B: tl.constexpr):
    """Per id, its logit bias (0 if none) among request b's entries: the first BLOCK_B
    (`bids` / `bval`, already loaded), then the rest from memory."""
    bv = _bias_in(ids, bids, bval)
    bb = tl.arange(0, BLOCK_B)
    for s in range(BLOCK_B, bias_cap, BLOCK_B):
        bv += _bias_in(ids, _list_at(bias_ids_ptr, b, bias_cap, s + bb, -1),
                       _list_at(bias_val_ptr, b, bias_cap, s + bb, 0.0))
    return bv


@triton.jit
def _in_list(ids, first, list_ptr, b, cap, BLOCK_C: tl.constexpr):
    """Per id, whether request b's list (history or bias ids, [B, cap], -1 padded) holds it:
    its first BLOCK_C entries `first` (already loaded), then the rest from memory."""
    found = _found(ids, first)
    hc = tl.arange(0, BLOCK_C)
    for s in range(BLOCK_C, cap, BLOCK_C):
        found = found | _found(ids, _list_at(list_ptr, b, cap, s + hc, -1))
    return found


@triton.jit(do_not_specialize=["parts"])  # (batch-dependent: no recompilation at 1 or 16)
def _pre_kernel(logits_ptr, row_stride, hist_ids_ptr, hist_cnt_ptr, hist_cap, bias_ids_ptr,
                bias_val_ptr, bias_cap, draft_ptr, ndraft_ptr, K, K1, rep_ptr, freq_ptr,
                pres_ptr, bits_ptr, pval_ptr, V, W,
                temp_ptr, gmask_ptr, g_sb, g_sj, hasg_ptr, topk_ptr, topp_ptr, minp_ptr,
                gmax_ptr, tick_ptr, thr_ptr, parts,
                HAS_HIST: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_EXTRA: tl.constexpr,
                HAS_ND: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
                POS: tl.constexpr, BIAS_CHUNK: tl.constexpr, HAS_PATCH: tl.constexpr,
                HAS_THR: tl.constexpr, HAS_GRAMMAR: tl.constexpr, GB: tl.constexpr,
                G_RUNS: tl.constexpr, STRIDE: tl.constexpr, RANK: tl.constexpr):
    """Everything before the read, over grid (rows N, [patch] + parts): program (n, 0) the
    patch of rows n .. n + POS - 1 (`_patch_req`; POS = 1 by default) when HAS_PATCH,
    the others the `parts` parts of row n's candidate threshold (`_thr_part`) when HAS_THR
    (a runtime count: one per row for large batches)."""
    _after_prior(RELEASE_LATE=True)  # (the tile kernel after it reads the logits early)
    n = tl.program_id(0)
    q = tl.program_id(1)
    if HAS_PATCH:
        if (q == 0) & (n % K1 % POS == 0):  # rows n .. n + POS - 1 of request b
            _patch_req(logits_ptr, row_stride, hist_ids_ptr, hist_cnt_ptr, hist_cap,
                       bias_ids_ptr, bias_val_ptr, bias_cap, draft_ptr, ndraft_ptr, K, K1,
                       rep_ptr, freq_ptr, pres_ptr, bits_ptr, pval_ptr, V, W, n // K1, n % K1,
                       HAS_HIST, HAS_BIAS, HAS_EXTRA, HAS_ND, BLOCK_H, BLOCK_K, POS,
                       BIAS_CHUNK, HAS_PATCH)
        q = q - 1
    if HAS_THR:  # noqa: SIM102 - a constexpr branch around a runtime one
        if q >= 0:
            _thr_part(logits_ptr, row_stride, V, K1, n, q, parts, temp_ptr, gmask_ptr, g_sb,
                      g_sj, hasg_ptr, topk_ptr, topp_ptr, minp_ptr, gmax_ptr, tick_ptr, thr_ptr,
                      HAS_GRAMMAR, GB, G_RUNS, STRIDE, RANK)


# A min-p-only row's threshold also at min-p's cut below the sample's max (`_thr_part`).
# SONICSPEC_MINP_BOUND=0: the rank statistic alone, as for the other filters.
MINP_BOUND = tl.constexpr(os.environ.get("SONICSPEC_MINP_BOUND", "1") == "1")
# The threshold's rank statistic by a 64 x 64 count instead of a bitonic sort of the group
# maxima (the sort's stages cross warps; on the critical path of every small batch).
# SONICSPEC_THR_SORT=1 (measurement) restores the sort.
THR_SORT = tl.constexpr(os.environ.get("SONICSPEC_THR_SORT", "0") == "1")


@triton.jit
def _group_max(logits_ptr, row_stride, V, n, b, j, g, gmask_ptr, g_sb, g_sj, has_g,
               HAS_GRAMMAR: tl.constexpr, G_RUNS: tl.constexpr, STRIDE: tl.constexpr):
    """The maxima of the sample's groups g of row n (grammar applied)."""
    # the sample as [groups, runs, 32] and the grammar words as [groups, runs, 1]: the
    # logits need no conversion to the words' layout (run 28: verify B = 256, V = 128256
    # 434 -> 428 us; as [groups, runs * 32] the words' load, equal along each run, was laid
    # out along the groups and every step's sample converted)
    word = (g[:, None, None] * G_RUNS + tl.arange(0, G_RUNS)[None, :, None]) * STRIDE
    lane = tl.arange(0, 32)[None, None, :]
    offs = word * 32 + lane
    x = tl.load(logits_ptr + n.to(tl.int64) * row_stride + offs, mask=offs < V,
                other=float("-inf")).to(tl.float32)
    if HAS_GRAMMAR:  # noqa: SIM102 - a constexpr branch around a runtime one
        if has_g != 0:
            gw = tl.load(gmask_ptr + b.to(tl.int64) * g_sb + j * g_sj + word,
                         mask=word * 32 < V, other=0)
            x = tl.where(((gw >> lane) & 1) != 0, x, float("-inf"))
    return tl.max(tl.max(x, 2), 1)


@triton.jit
def _thr_part(logits_ptr, row_stride, V, K1, n, q, parts, temp_ptr, gmask_ptr, g_sb, g_sj,
              hasg_ptr, topk_ptr, topp_ptr, minp_ptr, gmax_ptr, tick_ptr, thr_ptr,
              HAS_GRAMMAR: tl.constexpr, GB: tl.constexpr, G_RUNS: tl.constexpr,
              STRIDE: tl.constexpr, RANK: tl.constexpr):
    """Part q of `parts` (a power of two) of row n's candidate threshold, for rows with
    top-k/top-p/min-p: a sample of the row (every STRIDE-th run of 32 tokens, grammar
    applied, penalties not: the bound needs no exactness, only about 100-300 tokens above
    it) in 64 groups of G_RUNS runs, each a contiguous 1/64 of the row. With GB = 64 (a
    sample of at most 4096 tokens, `triton_backend.sample_plan`) one program takes every
    group in one step and keeps the maxima in registers (the host launches one part; more
    would each compute and store the same threshold). Otherwise this part takes groups
    [q 64 / parts, (q+1) 64 / parts), GB at a time (~2048 tokens), and stores their
    maxima; the last part to finish (an atomic ticket: zero before the call, in a buffer
    that outlives it, and zeroed again by that last part; no ticket for one part) takes the
    RANK-th largest of the 64 group maxima (at least RANK sampled tokens lie at or above it),
    in processed units (/ temperature), as the row's threshold: the tile kernel then keeps
    every token above it with one compare a token. A row with min-p alone (MINP_BOUND) takes
    the higher of that and min-p's cut below the sample's max, a bound on what it keeps (the
    row max is at least the sample's; penalties aside, which the row stage checks): a few
    tens of tokens instead of hundreds, so most of its tiles skip the candidates' stores and
    the row stage its raise."""
    b = n // K1
    j = n % K1
    temp_raw = tl.load(temp_ptr + b)
    k = tl.load(topk_ptr + b)
    top_p = tl.load(topp_ptr + b)
    min_p = tl.load(minp_ptr + b)
    if _filtered(temp_raw, k, top_p, min_p):
        has_g = 0
        if HAS_GRAMMAR:
            has_g = tl.load(hasg_ptr + b).to(tl.int32)
        gg = tl.arange(0, 64)
        ticket = parts - 1
        if GB == 64:  # the whole sample in one step: its maxima stay in registers
            gm = _group_max(logits_ptr, row_stride, V, n, b, j, gg, gmask_ptr, g_sb, g_sj,
                            has_g, HAS_GRAMMAR, G_RUNS, STRIDE)
        else:
            gpp = 64 // parts
            for g0 in range(q * gpp, (q + 1) * gpp, GB):
                g = g0 + tl.arange(0, GB)
                tl.store(gmax_ptr + n.to(tl.int64) * 64 + g,
                         _group_max(logits_ptr, row_stride, V, n, b, j, g, gmask_ptr, g_sb,
                                    g_sj, has_g, HAS_GRAMMAR, G_RUNS, STRIDE))
            tl.debug_barrier()  # every group max stored before the ticket (release) is taken
            if parts > 1:
                ticket = tl.atomic_add(tick_ptr + n, 1)
        if ticket == parts - 1:
            if GB < 64:
                gm = tl.load(gmax_ptr + n.to(tl.int64) * 64 + gg, cache_modifier=".cg")
            nlive = tl.sum((gm > float("-inf")).to(tl.int32), 0)
            r = tl.maximum(tl.minimum(nlive // 2, RANK), 1)
            if THR_SORT:
                thr = tl.max(tl.where(gg == r - 1, tl.sort(gm, 0, descending=True),
                                      float("-inf")), 0)
            else:
                # the r-th largest (with multiplicity) without a sort: the largest maximum
                # that at least r maxima reach (one 64 x 64 count, one reduction)
                reach = tl.sum((gm[:, None] >= gm[None, :]).to(tl.int32), 0)
                thr = tl.max(tl.where(reach >= r, gm, float("-inf")), 0)
            if temp_raw != 1.0:
                thr = _div(thr, temp_raw)
            if MINP_BOUND:  # noqa: SIM102 - a constexpr branch around a runtime one
                if (min_p > 0) & (k <= 0) & (top_p >= 1):
                    # a min-p row keeps only tokens with x >= M + ln(min_p) (processed), and
                    # the sample's max is at most M: above this bound lie all it keeps
                    top = tl.max(gm, 0)
                    if temp_raw != 1.0:
                        top = _div(top, temp_raw)
                    cut = top + tl.log(min_p)
                    thr = tl.maximum(thr, cut - 1e-3 - 1e-5 * tl.abs(cut))
            tl.store(thr_ptr + n, thr)
            if (GB < 64) & (parts > 1):  # every part has taken its ticket: zero it for
                tl.store(tick_ptr + n, 0)  # the next call


@triton.jit
def _patch_req(logits_ptr, row_stride, hist_ids_ptr, hist_cnt_ptr, hist_cap, bias_ids_ptr,
               bias_val_ptr, bias_cap, draft_ptr, ndraft_ptr, K, K1, rep_ptr, freq_ptr,
               pres_ptr, bits_ptr, pval_ptr, V, W, b, jbase,
               HAS_HIST: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_EXTRA: tl.constexpr,
               HAS_ND: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
               POS: tl.constexpr, BIAS_CHUNK: tl.constexpr, LAYOUT: tl.constexpr):
    """Rows b (K + 1) + jbase + [0, POS) of request b: the patch, over the ids the
    request's history, logit bias and drafts touch (never the whole vocabulary). One bit set
    a request, shared by its K + 1 rows (set by the program with jbase = 0, which zeroes it
    first); in each row the processed value at every such id (a draft that the row's
    position has not yet seen, a later one, keeps its unchanged logit there).

    History ids are unique per request (the batch merges prompt and output) and so are bias
    ids; an id is owned by its history entry, else by its bias entry, else by its first
    draft. The owner gathers the id's other contributions by comparing against the other
    groups in registers: no [N, V] scratch, no atomics but the bits, no phases. Generated
    count = output count + equal earlier drafts; seen = in the history or among the earlier
    drafts. Two round trips when the lists fit a chunk each (history BLOCK_H ids, bias
    BIAS_CHUNK, sized so that a compare of the two is ~8K wide): every list and setting
    first, all in flight together; then the logits at every id of the three groups; longer
    lists take their other chunks afterwards, one at a time."""
    row0 = b.to(tl.int64) * K1
    jj = jbase + tl.arange(0, POS)[:, None]  # the positions, [POS, 1]
    bits_row = bits_ptr + b.to(tl.int64) * W
    set_bits = jbase == 0
    hb = tl.arange(0, BLOCK_H)
    bb = tl.arange(0, BIAS_CHUNK)
    kb = tl.arange(0, BLOCK_K)
    # round trip 1: the lists' first chunks, the drafts and the settings
    if HAS_HIST:
        hids = _list_at(hist_ids_ptr, b, hist_cap, hb, -1)
        hcnt = _list_at(hist_cnt_ptr, b, hist_cap, hb, 0)
    if HAS_BIAS:
        bids = _list_at(bias_ids_ptr, b, bias_cap, bb, -1)
        bval = _list_at(bias_val_ptr, b, bias_cap, bb, 0.0)
    else:  # no bias entries (`_hist_terms` takes them)
        bids = tl.full([BIAS_CHUNK], -1, tl.int32)
        bval = tl.zeros([BIAS_CHUNK], tl.float32)
    if HAS_EXTRA:
        xd = tl.load(draft_ptr + b * K + kb, mask=kb < K, other=-1)
        if HAS_ND:
            nd = tl.load(ndraft_ptr + b)
        else:
            nd = K
        xd_ok = (kb < K) & (kb < nd) & (xd >= 0) & (xd < V)
    else:
        xd = tl.full([BLOCK_K], -1, tl.int64)
        xd_ok = kb < 0
    rep = tl.load(rep_ptr + b)
    freq = tl.load(freq_ptr + b)
    pres = tl.load(pres_ptr + b)
    if set_bits:  # the request's bit words, zeroed here (no memset before the launch)
        zb = tl.arange(0, 1024)
        for w0 in range(0, W, 1024):
            tl.store(bits_row + w0 + zb, 0, mask=w0 + zb < W)
        tl.debug_barrier()
    # owners and counts, in registers (a list longer than its chunk: its other chunks too)
    if HAS_HIST:
        hok, hc, hbv = _hist_terms(hids, hcnt, V, jj, xd, xd_ok, kb, bids, bval, bias_ids_ptr,
                                   bias_val_ptr, b, bias_cap, HAS_BIAS, BIAS_CHUNK)
    if HAS_BIAS:
        bok = (bids >= 0) & (bids < V)
        if HAS_HIST:
            bok = bok & ~_in_list(bids, hids, hist_ids_ptr, b, hist_cap, BLOCK_H)
        bc = _earlier(bids, jj, xd, xd_ok, kb)
    if HAS_EXTRA:
        same = (xd[:, None] == xd[None, :]) & xd_ok[None, :]
        eok = xd_ok & (tl.sum((same & (kb[None, :] < kb[:, None])).to(tl.int32), 1) == 0)
        if HAS_HIST:
            eok = eok & ~_in_list(xd, hids, hist_ids_ptr, b, hist_cap, BLOCK_H)
        if HAS_BIAS:
            eok = eok & ~_in_list(xd, bids, bias_ids_ptr, b, bias_cap, BIAS_CHUNK)
        ec = _earlier(xd, jj, xd, xd_ok, kb)
    # round trip 2: the logits at every id of the three groups
    if HAS_HIST:
        xh = _gather(logits_ptr, row0, row_stride, jj, K1, hids, hok)
    if HAS_BIAS:
        xb = _gather(logits_ptr, row0, row_stride, jj, K1, bids, bok)
    if HAS_EXTRA:
        xe = _gather(logits_ptr, row0, row_stride, jj, K1, xd, eok)
    if HAS_HIST:
        _write_patch(xh, b, jj, K1, hids, hok, hok[None, :], hc, hbv[None, :], rep, freq,
                     pres, pval_ptr, V, bits_row, set_bits, LAYOUT)
    if HAS_BIAS:
        _write_patch(xb, b, jj, K1, bids, bok, bc > 0, bc, bval[None, :], rep, freq, pres,
                     pval_ptr, V, bits_row, set_bits, LAYOUT)
    if HAS_EXTRA:
        _write_patch(xe, b, jj, K1, xd, eok, ec > 0, ec, 0.0, rep, freq, pres, pval_ptr, V,
                     bits_row, set_bits, LAYOUT)
    # the other chunks of long lists, one at a time
    if HAS_HIST:
        for start in range(BLOCK_H, hist_cap, BLOCK_H):
            ids = _list_at(hist_ids_ptr, b, hist_cap, start + hb, -1)
            ok, cnt, bv = _hist_terms(ids, _list_at(hist_cnt_ptr, b, hist_cap, start + hb, 0),
                                      V, jj, xd, xd_ok, kb, bids, bval, bias_ids_ptr,
                                      bias_val_ptr, b, bias_cap, HAS_BIAS, BIAS_CHUNK)
            x = _gather(logits_ptr, row0, row_stride, jj, K1, ids, ok)
            _write_patch(x, b, jj, K1, ids, ok, ok[None, :], cnt, bv[None, :], rep, freq,
                         pres, pval_ptr, V, bits_row, set_bits, LAYOUT)
    if HAS_BIAS:
        for start in range(BIAS_CHUNK, bias_cap, BIAS_CHUNK):
            ids = _list_at(bias_ids_ptr, b, bias_cap, start + bb, -1)
            ok = (ids >= 0) & (ids < V)
            if HAS_HIST:
                ok = ok & ~_in_list(ids, hids, hist_ids_ptr, b, hist_cap, BLOCK_H)
            val = tl.where(ok, _list_at(bias_val_ptr, b, bias_cap, start + bb, 0.0), 0.0)
            cnt = _earlier(ids, jj, xd, xd_ok, kb)
            x = _gather(logits_ptr, row0, row_stride, jj, K1, ids, ok)
            _write_patch(x, b, jj, K1, ids, ok, cnt > 0, cnt, val[None, :], rep, freq, pres,
                         pval_ptr, V, bits_row, set_bits, LAYOUT)


# The tile's logits, read once, go first out of L2 (evict_first), so that the stats and
# candidates the row stage reads next stay. Run 42 (H200, two repeats each): sample B = 256
# 155 -> 152-153 us at V = 262144, 91 -> 89-90 at V = 128256, 45 -> 44 at V = 32000; verify
# within +-3 us of 727 / 404 / 170. SONICSPEC_X_EVICT= (empty) restores the default policy.
X_EVICT = tl.constexpr(os.environ.get("SONICSPEC_X_EVICT", "evict_first"))
# The tile's masses as one sum of exp(x - M) below the tile max M over every token (the sum
# waits for M) instead of per-row sums below each row's max scaled afterwards; and the tile's
# argmax (the lowest lane at each row's max and the packed (key, -id) reduction) only in
# greedy rows, the only ones whose row stage uses it: other rows take the max alone, filtered
# rows the ids of their candidates in the candidates' branch. Hot path of a temperature row
# 530 -> 368 SASS instructions a warp (sm_90). Run 49 (H200, same call): sample B = 256
# 81 -> 74 us at V = 128256, 138 -> 122 at V = 262144; verify 359 -> 323 and 642 -> 560;
# each knob alone gains about half. SONICSPEC_SUM_AT_MAX=0 / SONICSPEC_ARG_GREEDY=0 restore
# the previous forms.
SUM_AT_MAX = tl.constexpr(os.environ.get("SONICSPEC_SUM_AT_MAX", "1") == "1")
ARG_GREEDY = tl.constexpr(os.environ.get("SONICSPEC_ARG_GREEDY", "1") == "1")
# With SCAN 2, a filtered tile's rows take their count above the threshold and the lane of the
# token above it from one packed sum along the lanes instead of a min for the lane of the row's
# max and a sum for the count (`_tile_kernel`). SONICSPEC_PACK_LANE=0 restores the two.
PACK_LANE = tl.constexpr(os.environ.get("SONICSPEC_PACK_LANE", "1") == "1")
# In a batch without filters (no candidates) the tile kernel leaves the tokens undivided by
# the temperature (`_tile_kernel`): the division is 4 instructions a token, and a row of
# temperature alone's path 329 -> 272 SASS instructions a warp (sm_90, V = 262144). Run 119
# (H200, rows of temperature 0.7 alone): the tile kernel 1-4% faster (PDL-off, B = 64 / 256,
# V = 262144), graph replays within 1% (that kernel is near one read of the logits there);
# batches with filters compile to the same SASS as before. SONICSPEC_LAZY_TEMP=0 divides
# every token.
LAZY_TEMP = tl.constexpr(os.environ.get("SONICSPEC_LAZY_TEMP", "1") == "1")
# The tile kernel loads its row's settings (temperature, flags) after the tile, not before
# (`_tile_kernel`). SONICSPEC_TILE_SETTINGS_FIRST=1 (measurement) restores the old order.
SETTINGS_FIRST = tl.constexpr(os.environ.get("SONICSPEC_TILE_SETTINGS_FIRST", "0") == "1")


@triton.jit
def _row_lane(x, rmax, lane):
    """Per row of the tile, the lowest lane holding its max."""
    return tl.min(tl.where(x == rmax[:, None], lane[None, :], 32), 1)


@triton.jit
def _max_arg(rmax, rlane, word):
    """The tile's max and the lowest id at it, from one reduction over the rows of (key of
    the row's max, -id) packed in an int64."""
    rid = word * 32 + rlane
    pk = tl.max((_key(rmax).to(tl.int64) << 32) | (2147483647 - rid).to(tl.int64), 0)
    return _unkey((pk >> 32).to(tl.int32)), 2147483647 - (pk & 0xFFFFFFFF).to(tl.int32)


@triton.jit
def _rank_store(x, offs, sel, crow, o, n_sel, cpair_ptr, tcnt_ptr, C: tl.constexpr):
    """A tile's tokens above the threshold (sel; crow per 32-token row), all stored by their
    rank in the tile (the rows' counts' exclusive prefix plus a scan along the lanes), in id
    order, and their count n_sel."""
    rank = (tl.cumsum(crow, 0) - crow)[:, None] + tl.cumsum(sel.to(tl.int32), 1) - 1
    _store_pair(cpair_ptr + o * C + rank, x, offs, sel & (rank < C), False)
    tl.store(tcnt_ptr + o, n_sel)


@triton.jit
def _tdiv_exact(temp):
    """Whether `_tdiv` divides by temp exactly: a normal t in [2^-20, 2^20]."""
    return (temp >= 9.5367431640625e-07) & (temp <= 1048576.0)


@triton.jit
def _tile_div(x, temp):
    """A tile's tokens x / temp, rounded as torch divides (-inf stays -inf): by `_tdiv` from
    one reciprocal where that is exact, else by `_div`."""
    if temp != 1.0:
        if _tdiv_exact(temp):
            x = _tdiv(x, _div(temp * 0.0 + 1.0, temp), temp)
        else:
            x = _div(x, temp)
    return x


@triton.jit
def _tile_load(logits_ptr, row_stride, n, t, offs, V, BLOCK_V: tl.constexpr,
               EVICT: tl.constexpr):
    """Tile t of row n's logits at ids offs as float32, -inf past V (every tile but a row's
    last loads without masks or fill), with eviction policy EVICT."""
    x_ptr = logits_ptr + n.to(tl.int64) * row_stride + offs
    if (t + 1) * BLOCK_V <= V:
        x = tl.load(x_ptr, eviction_policy=EVICT).to(tl.float32)
    else:
        x = tl.load(x_ptr, mask=offs < V, other=float("-inf"), eviction_policy=EVICT)
        x = x.to(tl.float32)
    return x


@triton.jit
def _tile_values(x, n, b, j, K1, word, lane, offs, V, flags, has_g, bits_ptr, pval_ptr, W,
                 gmask_ptr, g_sb, g_sj, HAS_PATCH: tl.constexpr, HAS_GRAMMAR: tl.constexpr):
    """The tile's logits x ([BLOCK_V / 32, 32]: rows `word`, lanes `lane`, ids `offs`) with
    the patch and the grammar applied, a bit word loaded once a 32-token row."""
    if HAS_PATCH:  # noqa: SIM102 - a constexpr branch around a runtime one
        # only rows with a penalty or a bias (flag bit 1) read the bits (elsewhere the patch,
        # if any, is an earlier draft's unchanged logit; loading the whole tile of values
        # with the bits, without the round trip after them, was slower at B >= 64: run 33)
        if (flags & 2) != 0:
            pw = tl.load(bits_ptr + b.to(tl.int64) * W + word, mask=word < W, other=0)
            hit = ((pw[:, None] >> lane[None, :]) & 1) != 0  # (bits past V are never set)
            # (x as the masked-off value: each hit loads into x's own register, and nothing
            # waits on one row's values before the next row's words are loaded)
            x = tl.load(_pval_at(pval_ptr, n, b, j, K1, V, offs, HAS_PATCH), mask=hit, other=x)
    if HAS_GRAMMAR:  # noqa: SIM102 - a constexpr branch around a runtime one
        if has_g != 0:  # (rows without a grammar skip the words)
            gw = tl.load(gmask_ptr + b.to(tl.int64) * g_sb + j * g_sj + word, mask=word < W,
                         other=-1)
            x = tl.where(((gw[:, None] >> lane[None, :]) & 1) != 0, x, float("-inf"))
    return x


@triton.jit(noinline=True)
def _scan_store(logits_ptr, row_stride, V, n, b, j, K1, t, temp, gmask_ptr, g_sb, g_sj, has_g,
                flags, bits_ptr, pval_ptr, W, thr, o, n_sel, cpair_ptr, tcnt_ptr,
                C: tl.constexpr, BLOCK_V: tl.constexpr, HAS_GRAMMAR: tl.constexpr,
                HAS_PATCH: tl.constexpr):
    """Tile t of row n, whose tokens above the row's threshold thr number n_sel with two in
    some 32-token row: all of them stored by their rank in the tile, in id order, and the
    count. Not inlined, so its registers do not weigh on the tile kernel's hot path at its
    register cap (a rare branch: ~2% of the tiles at V = 262144, ~5% of a grammar row's); a
    function takes scalars only, so it processes the tile again, as the tile kernel does (a
    bit word a 32-token row, the temperature by `_tdiv`: the same values)."""
    NW: tl.constexpr = BLOCK_V // 32
    word = t * NW + tl.arange(0, NW)
    lane = tl.arange(0, 32)
    offs = word[:, None] * 32 + lane[None, :]
    x = _tile_load(logits_ptr, row_stride, n, t, offs, V, BLOCK_V, "")
    x = _tile_values(x, n, b, j, K1, word, lane, offs, V, flags, has_g, bits_ptr, pval_ptr, W,
                     gmask_ptr, g_sb, g_sj, HAS_PATCH, HAS_GRAMMAR)
    x = _tile_div(x, temp)  # (LAZY_TEMP never holds here)
    sel = x > thr
    _rank_store(x, offs, sel, tl.sum(sel.to(tl.int32), 1), o, n_sel, cpair_ptr,
                tcnt_ptr, C)


@triton.jit
def _tile_kernel(logits_ptr, row_stride, V, K1, temp_ptr, flags_ptr,
                 gmask_ptr, g_sb, g_sj, bits_ptr, pval_ptr, W, thr_ptr,
                 tmax_ptr, tsum_ptr, targ_ptr, tcnt_ptr, tbnd_ptr, cpair_ptr,
                 T_PAD: tl.constexpr, C: tl.constexpr, BLOCK_V: tl.constexpr,
                 HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr, HAS_CAND: tl.constexpr,
                 SCAN: tl.constexpr = 0, PROBE: tl.constexpr = 0,
                 TRIGGER_LAST: tl.constexpr = 0):
    """Stage 1, one program per (row n = b (K + 1) + j, tile t): reads the tile once and
    writes its max, sum exp(x - max) and (greedy rows: the row stage uses it nowhere else)
    the lowest id of the max; for rows with a filter, also candidates.

    The tile is held as [BLOCK_V / 32, 32]: a row of it is one word of the grammar and patch
    bit masks, loaded once and shifted per lane (no per-token gather). Every quantity is a
    reduction along the 32 lanes (a warp's shuffles) or over the BLOCK_V / 32 row results:
    a few instructions per token, which is what keeps the kernel near the memory floor.

    Candidates without selection passes over the tokens: every token above the row's
    threshold `thr` (set before the read by `_thr_part` from a sample of the row, so that
    some 100-300 tokens of the row lie above it: one or two a tile) is one. When no 32-token
    row of the tile holds two of them (the common case), the rows' maxima above thr take
    the slots by a prefix count over the rows. A tile with two in a row (`triton_backend.
    tile_scan`: SCAN 1 and 2) stores all its tokens above thr by their rank in the tile
    (the rows' counts' prefix and a scan along the lanes), in id order, so the row stage
    needs no id sort; SCAN 2 does it in a function that is not inlined (`_scan_store`).
    SCAN 0 (measurement only) gives the other tokens of such rows the next slots from an
    atomic counter, in no order (the row stage then sorts by id). The tile's count is the
    number above thr, so the row stage sees an overflow (more than C) and then trusts only
    the tile max. (Earlier versions took a threshold per tile from its row maxima: a
    histogram per program, and the row bound, the max over the tiles' bounds, needed ~8
    rows a tile: bench/NOTES-sampler.md, runs 7-10.)

    TRIGGER_LAST: only the grid's last TRIGGER_LAST programs let the next kernel launch
    early (`_after_prior`'s LAST; 0: every program)."""
    # After the pre kernel (launched when HAS_PATCH or HAS_CAND), which lets this grid
    # launch only once the logits' writer has finished (`_after_prior`), the tile and the
    # settings (inputs of the whole sequence) are read before the wait for the pre kernel's
    # thresholds and patch: the read overlaps the pre kernel's last programs. As the first
    # kernel of the sequence, this one waits before reading anything.
    if not (HAS_PATCH or HAS_CAND):
        _after_prior(LAST=TRIGGER_LAST)
    # grid (B, K + 1, T): the row's request and position without a division (B on the
    # first axis, which takes more than 65535: the law tests draw 600000 rows at once)
    b = tl.program_id(0)
    j = tl.program_id(1)
    t = tl.program_id(2)
    n = b * K1 + j
    NW: tl.constexpr = BLOCK_V // 32
    tl.static_assert(NW <= 64)  # (the candidates' row mask is one int64)
    row = tl.arange(0, NW)
    word = t * NW + row
    lane = tl.arange(0, 32)
    offs = word[:, None] * 32 + lane[None, :]
    # The tile first, then the row's settings, in flight with it, and its threshold right
    # after the wait (loads after the stats' stores would each wait a round trip at the
    # program's end). Loaded before the tile (SETTINGS_FIRST), the settings' first uses
    # (the temperature's select, their moves to uniform registers) were scheduled before
    # the tile's loads, which then waited for them: two round trips a program, not one.
    if SETTINGS_FIRST:
        temp_raw = tl.load(temp_ptr + b)
        flags = tl.load(flags_ptr + b)
    x = _tile_load(logits_ptr, row_stride, n, t, offs, V, BLOCK_V, X_EVICT)
    if not SETTINGS_FIRST:
        temp_raw = tl.load(temp_ptr + b)
        flags = tl.load(flags_ptr + b)
    temp = tl.where(temp_raw == 0, 1.0, temp_raw)
    has_g = flags & 4  # (flags: SamplingBatch.row_flags: filtered, patched, grammar)
    if HAS_PATCH or HAS_CAND:
        _after_prior(LAST=TRIGGER_LAST)
    filt = False
    thr = 0.0
    if HAS_CAND:
        filt = (flags & 1) != 0
        thr = tl.load(thr_ptr + n)  # the row's threshold (`_thr_part`; unset if not filt)
    x = _tile_values(x, n, b, j, K1, word, lane, offs, V, flags, has_g, bits_ptr, pval_ptr, W,
                     gmask_ptr, g_sb, g_sj, HAS_PATCH, HAS_GRAMMAR)
    # The temperature: every token divided (exactly, as torch), except where no row keeps
    # candidates (LAZY_TEMP, a batch without filters): there only the tile's max and mass
    # need it, and the division is monotone, so the max is divided once and the mass takes
    # exp((x - max) / t) as exp((x - max) rcp), as approximate as the mass's exp already is.
    LAZY: tl.constexpr = LAZY_TEMP and not HAS_CAND
    lazy = tl.full((), 0, tl.int1)
    if LAZY:  # the mass's scale: 1 where x is divided or t = 1
        esc = temp * 0.0 + 1.0
        if temp != 1.0:  # -inf stays -inf
            if _tdiv_exact(temp):
                lazy = tl.full((), 1, tl.int1)
                esc = _div(temp * 0.0 + 1.0, temp)
            else:
                x = _div(x, temp)
    else:
        esc = 1.0
        x = _tile_div(x, temp)
    rmax = tl.max(x, 1)
    if ARG_GREEDY:
        # the argmax only where the row stage uses it (greedy rows); the candidates' ids
        # below, in their branch
        if temp_raw == 0:
            m, arg = _max_arg(rmax, _row_lane(x, rmax, lane), word)
        else:
            m = tl.max(rmax, 0)
            arg = tl.full((), 0, tl.int32)
    else:
        rlane = _row_lane(x, rmax, lane)
        # (the candidates' row mask and count in this reduction: one cross-warp round fewer,
        # but a compare and a warp sum a token in every filtered row's tiles, 6-12% slower
        # at B >= 64 in run 35)
        m, arg = _max_arg(rmax, rlane, word)
    m0 = tl.where(m > float("-inf"), m, 0.0)
    s = m0 * 0.0 + 1.0
    if temp_raw != 0:  # greedy rows need only the argmax
        # ex2.approx(x - max, times log2 e) on the SFU, not expf's ~8 instructions: the tile
        # masses only weigh tiles and normalise (they are never compared token by token
        # with torch, whose sums differ by rounding anyway), the error is ~2^-22 relative
        # for the tokens near the max that carry the mass, and the row stage evaluates the
        # tokens it compares and draws with expf. One sum below the tile max over every
        # token (SUM_AT_MAX; else each row's sum below its own max, without waiting for the
        # tile's, scaled afterwards: more shuffles, run 49). (One reduction of the key and
        # the sum with an online-softmax combine was slower: run 14, ~10% at B = 256.)
        if SUM_AT_MAX:
            s = tl.sum(tl.reshape(_mass_exp(x - m0, esc), [BLOCK_V], can_reorder=True), 0)
        else:
            live = rmax > float("-inf")
            r0 = tl.where(live, rmax, 0.0)
            rs = tl.sum(_mass_exp(x - r0[:, None], esc), 1)
            s = tl.sum(tl.where(live, rs * _mass_exp(r0 - m0, esc), 0.0), 0)
    if LAZY:  # noqa: SIM102 - a constexpr branch around a runtime one
        if lazy:
            m = _tdiv(m, esc, temp)  # (the tile's max as the divided tokens' max would be)
    o = n.to(tl.int64) * T_PAD + t
    tl.store(tmax_ptr + o, m)
    tl.store(tsum_ptr + o, s)
    tl.store(targ_ptr + o, arg)
    if HAS_CAND:  # noqa: SIM102 - a constexpr branch around a runtime one
        if filt:
            if m > thr:
                # Slots: the maxima of the rows above thr take the first ones by a prefix
                # count over the rows (no per-token work); a tile with two in one row (rare)
                # stores by rank instead (SCAN), or its rows' other tokens take the next
                # slots from an atomic counter (SCAN 0). The counts of tokens and of rows
                # above thr: one reduction, packed.
                if ARG_GREEDY and PACK_LANE and (SCAN == 2):
                    # (a filtered row is not greedy: no argmax above) one sum along the lanes
                    # for a row's count above thr and, where it is one, the lane of that token,
                    # which is then the row's max: the rows with two never use a lane (SCAN;
                    # with the inline scan the packed sum spills: 112 B at V = 32000)
                    sel = x > thr
                    pk = tl.sum(tl.where(sel, 65536 + lane[None, :], 0), 1)
                    crow = pk >> 16
                    rlane = pk & 65535
                    rid = word * 32 + rlane
                else:
                    if ARG_GREEDY:  # (a filtered row is not greedy: no argmax above)
                        rlane = _row_lane(x, rmax, lane)
                    rid = word * 32 + rlane
                    sel = x > thr
                    crow = tl.sum(sel.to(tl.int32), 1)
                over = crow > 0  # the rows holding a token above thr
                # one reduction over the rows: the mask of rows above thr (one bit a row:
                # BLOCK_V = 64 rows of 32 at most) and the count of tokens above it; a row's
                # slot is the number of rows above thr before it (a popcount: no scan)
                rbit = tl.where(over, tl.full([NW], 1, tl.int64) << row.to(tl.int64), 0)
                rmask, n_sel = tl.reduce((rbit, crow), 0, _add2)
                n_top = _popc64(rmask)
                if PROBE != 1:  # PROBE 1, measurement only: no candidate stores
                    if SCAN and (n_sel > n_top):
                        # a row with two: every selected token by its rank in the tile (the
                        # rows' counts' prefix plus a scan along the lanes), in id order, so
                        # the row stage needs no id sort
                        if SCAN == 2:
                            _scan_store(logits_ptr, row_stride, V, n, b, j, K1, t, temp,
                                        gmask_ptr, g_sb, g_sj, has_g, flags, bits_ptr,
                                        pval_ptr, W, thr, o, n_sel, cpair_ptr,
                                        tcnt_ptr, C, BLOCK_V,
                                        HAS_GRAMMAR, HAS_PATCH)
                        else:
                            _rank_store(x, offs, sel, crow, o, n_sel, cpair_ptr,
                                        tcnt_ptr, C)
                    else:
                        below = (tl.full([NW], 1, tl.int64) << row.to(tl.int64)) - 1
                        slot = _popc64(rmask & below)
                        _store_pair(cpair_ptr + o * C + slot, rmax, rid, over & (slot < C),
                                    True)
                        if n_sel > n_top:  # count | 2**24: slots past the maxima in no id order
                            _compact(cpair_ptr, tcnt_ptr, o, x, offs,
                                     sel & (lane[None, :] != rlane[:, None]), n_top,
                                     n_sel | 16777216, C, BLOCK_V)
                        else:
                            tl.store(tcnt_ptr + o, n_sel)
            else:
                tl.store(tcnt_ptr + o, 0)
            tl.store(tbnd_ptr + o, tl.minimum(thr, m))


@triton.jit
def _gap_bin(g, NB: tl.constexpr):
    """Log-spaced bin of a gap g >= 0 below the max: 8 bins per octave of g + 1 (1/8 nat wide
    at the max, 8 nats at g ~ 100), from the float's bits; monotone; clamped to NB - 1."""
    return tl.minimum(((g + 1.0).to(tl.int32, bitcast=True) >> 20) - 1016, NB - 1)


@triton.jit
def _search(logits_ptr, row_stride, V, n, b, j, K1, T, temp, gmask_ptr, g_sb, g_sj, has_g,
            bits_ptr, pval_ptr, W, k, top_p, m0,
            BLOCK_V: tl.constexpr, HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """Exact thresholds of one row by bisection over the order-preserving int32 keys, each
    step one pass over the row (slow path). Top-k: the largest key m with count(key >= m) >=
    k is the k-th largest value. Top-p: the smallest key m with mass(key > m) < top_p; the
    threshold is the float32 probability of that value, and every token whose probability
    equals it is kept too (the torch spec compares probabilities: distinct x whose x - M
    rounds to one float32 share one p). Returns (x_lo of top-k, its kept mass, top-p's
    probability threshold, 0 without top-p)."""
    ar = tl.arange(0, BLOCK_V)
    x_lo = float("-inf")
    if k > 0:
        lo = -2147483648
        hi = 2147483647
        for _ in range(32):
            mid = ((lo.to(tl.int64) + hi.to(tl.int64) + 1) >> 1).to(tl.int32)
            cnt = 0
            for t in range(T):
                offs = t * BLOCK_V + ar
                x = _processed(logits_ptr, n, b, j, K1, offs, V, row_stride, temp, gmask_ptr,
                               g_sb, g_sj, has_g, bits_ptr, pval_ptr, W, HAS_GRAMMAR, HAS_PATCH)
                cnt += tl.sum(((_key(x) >= mid) & (offs < V)).to(tl.int32), 0)
            lo = tl.where(cnt >= k, mid, lo)
            hi = tl.where(cnt >= k, hi, mid - 1)
        x_lo = _unkey(lo)
    s_a = 0.0
    for t in range(T):
        offs = t * BLOCK_V + ar
        x = _processed(logits_ptr, n, b, j, K1, offs, V, row_stride, temp, gmask_ptr, g_sb, g_sj,
                       has_g, bits_ptr, pval_ptr, W,
                       HAS_GRAMMAR, HAS_PATCH)
        s_a += tl.sum(tl.where((x > float("-inf")) & (x >= x_lo), _exp(x - m0), 0.0), 0)
    s_a = tl.maximum(s_a, 1.1754943508222875e-38)
    pthr = 0.0
    if top_p < 1:
        lo = _key(tl.full((), float("-inf"), tl.float32))
        hi = 2147483647
        for _ in range(32):
            mid = ((lo.to(tl.int64) + hi.to(tl.int64)) >> 1).to(tl.int32)
            mass = 0.0
            for t in range(T):
                offs = t * BLOCK_V + ar
                x = _processed(logits_ptr, n, b, j, K1, offs, V, row_stride, temp, gmask_ptr,
                               g_sb, g_sj, has_g, bits_ptr, pval_ptr, W, HAS_GRAMMAR, HAS_PATCH)
                keep = (x > float("-inf")) & (x >= x_lo) & (_key(x) > mid)
                mass += tl.sum(tl.where(keep, _div(_exp(x - m0), s_a), 0.0), 0)
            good = mass < top_p
            hi = tl.where(good, mid, hi)
            lo = tl.where(good, lo, mid + 1)
        x_p = _unkey(lo)
        if x_p > float("-inf"):
            pthr = _div(_exp(x_p - m0), s_a)
    return x_lo, s_a, pthr


@triton.jit
def _draft_q(q_ptr, qid_ptr, Q, b, j, K, x, offs_ok, Q_MODE: tl.constexpr,
             BLOCK_Q: tl.constexpr):
    """q_j(x) for a vector of ids x: mode 0 none (one-hot at the draft), 1 dense [B, K, V]
    (Q = V), 2 sparse (ids, probs) [B, K, Q] (duplicates summed)."""
    base = (b.to(tl.int64) * K + j) * Q
    if Q_MODE == 1:
        q = tl.load(q_ptr + base + x, mask=offs_ok, other=0.0).to(tl.float32)
    else:
        q = tl.zeros(x.shape, tl.float32)
        for start in range(0, Q, BLOCK_Q):
            for i in tl.static_range(BLOCK_Q):
                ok = start + i < Q
                qid = tl.load(qid_ptr + base + start + i, mask=ok, other=-1)
                qp = tl.load(q_ptr + base + start + i, mask=ok, other=0.0).to(tl.float32)
                q += tl.where(offs_ok & (x == qid) & ok, qp, 0.0)
    return q


@triton.jit
def _choose_tile(tmass, u, T_PAD: tl.constexpr):
    """Inverse CDF over tile masses at u * (their total), prefix and total in float64 (as
    `sampling.inverse_cdf`): the first positive tile whose inclusive prefix exceeds the
    target (else the last positive tile) and the float64 part of the target left inside it.
    (A parallel scan need not be monotone in the last bit, so "count(cm <= target)" could
    pick a zero.)"""
    tiles = tl.arange(0, T_PAD)
    m64 = tmass.to(tl.float64)
    cm = tl.cumsum(m64, 0)
    target = u.to(tl.float64) * tl.sum(m64, 0)
    tsel = tl.min(tl.where((cm > target) & (tmass > 0), tiles, T_PAD), 0)
    last_pos = tl.max(tl.where(tmass > 0, tiles, -1), 0)
    tsel = tl.maximum(tl.where(tsel >= T_PAD, last_pos, tsel), 0)
    return tsel, target - tl.sum(tl.where(tiles < tsel, m64, 0.0), 0)


# The draw from an id-ordered list by one tuple reduction of ids (`_pick_ids`, the default
# since run 25); SONICSPEC_PICK_FUSED=0 (measurement) takes three reductions of positions.
PICK_FUSED = tl.constexpr(os.environ.get("SONICSPEC_PICK_FUSED", "1") != "0")


@triton.jit
def _pick_vec(w, ids, u, R: tl.constexpr):
    """Inverse CDF over a short id-ordered list at u * (its total), in float64: the first
    positive entry whose inclusive prefix exceeds the target, else the last positive one;
    its id (0 if nothing is positive)."""
    if PICK_FUSED:
        return _pick_ids(w, ids, u)
    else:
        return _pick_scan(w, ids, u, R)


@triton.jit
def _pick_scan(w, ids, u, R: tl.constexpr):
    """`_pick_vec` by positions: the first and last positive positions, then the id at the
    chosen one (three reductions after the scan)."""
    rr = tl.arange(0, R)
    w64 = w.to(tl.float64)
    cdf = tl.cumsum(w64, 0)
    target = u.to(tl.float64) * tl.sum(w64, 0)
    first = tl.min(tl.where((cdf > target) & (w > 0), rr, R), 0)
    last = tl.max(tl.where(w > 0, rr, -1), 0)
    idx = tl.where(first < R, first, last)
    return tl.where(last < 0, 0, tl.sum(tl.where(rr == idx, ids, 0), 0))


@triton.jit
def _min_max(a0, a1, b0, b1):
    return tl.minimum(a0, b0), tl.maximum(a1, b1)


@triton.jit
def _pick_ids(w, ids, u):
    """`_pick_vec` by ids: the positive entries' ids ascend with their positions, so the
    first one past the target has the least id past it and the last positive one the
    greatest positive id: one tuple reduction after the scan."""
    w64 = w.to(tl.float64)
    cdf = tl.cumsum(w64, 0)
    target = u.to(tl.float64) * tl.sum(w64, 0)
    past = (cdf > target) & (w > 0)
    lo, hi = tl.reduce((tl.where(past, ids, 2147483647), tl.where(w > 0, ids, -1)), 0,
                       _min_max)
    return tl.where(hi < 0, 0, tl.where(lo < 2147483647, lo, hi))


@triton.jit
def _in_tile(logits_ptr, row_stride, V, n, b, j, K, tile, rest, temp, gmask_ptr, g_sb, g_sj,
             has_g, bits_ptr, pval_ptr, W,
             x_lo, m0, s_c, pthr, minp, resid, wc, xd, q_ptr, qid_ptr, Q,
             BLOCK_V: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_Q: tl.constexpr,
             HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """The token of tile `tile` where the in-tile inverse CDF (float64 prefix) passes `rest`
    (float64): weights exp(x - M) of kept tokens, or with `resid` the residual
    max(w / wc - q, 0) of the draft law q."""
    offs = tile * BLOCK_V + tl.arange(0, BLOCK_V)
    x = _processed(logits_ptr, n, b, j, K + 1, offs, V, row_stride, temp, gmask_ptr, g_sb, g_sj,
                   has_g, bits_ptr, pval_ptr, W,
                   HAS_GRAMMAR, HAS_PATCH)
    w = tl.where(_keep(x, x_lo, m0, s_c, pthr, minp), _exp(x - m0), 0.0)
    if resid:
        if Q_MODE == 0:
            q = (offs == xd).to(tl.float32)
        else:
            q = _draft_q(q_ptr, qid_ptr, Q, b, j, K, offs, offs < V, Q_MODE, BLOCK_Q)
        w = tl.maximum(_div(w, wc) - q, 0.0)
    cdf = tl.cumsum(w.to(tl.float64), 0)
    first = tl.min(tl.where((cdf > rest) & (w > 0), offs, 2147483647), 0)
    lastw = tl.max(tl.where(w > 0, offs, -1), 0)
    tok = tl.where(first < 2147483647, first, lastw)
    return tl.where(lastw < 0, 0, tok)


@triton.jit
def _weight_at(logits_ptr, row_stride, V, n, b, j, K1, xd, temp, gmask_ptr, g_sb, g_sj, has_g,
               bits_ptr, pval_ptr, W, x_lo, m0, s_c, pthr, minp,
               HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """exp(x - M) of token xd if it is kept (0 if not, or outside the vocabulary)."""
    lane = tl.arange(0, 2)
    offs = tl.where(lane == 0, xd, -1).to(tl.int32)
    x = _processed(logits_ptr, n, b, j, K1, offs, V, row_stride, temp, gmask_ptr, g_sb, g_sj,
                   has_g, bits_ptr, pval_ptr, W,
                   HAS_GRAMMAR, HAS_PATCH)
    keep = _keep(x, x_lo, m0, s_c, pthr, minp) & (lane == 0)
    return tl.sum(tl.where(keep, _exp(x - m0), 0.0), 0)


@triton.jit
def _q_at(q_ptr, qid_ptr, Q, b, j, K, xd, inside, Q_MODE: tl.constexpr,
          BLOCK_Q: tl.constexpr):
    """q_j(xd), the draft probability of the draft token (1 for deterministic drafts)."""
    if Q_MODE == 0:
        return 1.0
    lane = tl.arange(0, 2)
    offs = tl.where(lane == 0, xd, -1)
    # row K (the bonus position) has no draft law: clamp j so nothing is read past q's end
    return tl.sum(_draft_q(q_ptr, qid_ptr, Q, b, tl.minimum(j, K - 1), K, offs,
                           (lane == 0) & inside, Q_MODE, BLOCK_Q), 0)


@triton.jit
def _slots(cpair_ptr, coff, tv):
    """A row's candidate slots at coff ([T_PAD, C]) in its real tiles tv, as (id, value)
    pairs (`_pair`; (0, -inf) elsewhere)."""
    return tl.load(cpair_ptr + coff, mask=tv[:, None], other=NO_PAIR)


STAMP_SLOTS = tl.constexpr(16)  # the last slots of a row's second-chance scratch
STAMP_COUNT = tl.constexpr(15)  # the slot of the row's candidate count before the raise


@triton.jit
def _stamp(ptr, i, dep, STAMP: tl.constexpr):
    """Measurement (STAMP, GPU only): the SM clock once `dep` (a scalar or a vector) is
    known, stored at ptr + i (bench/sampler_probe.py `stamps`)."""
    if STAMP:
        d = tl.max((dep == 0).to(tl.int32), 0) if len(dep.shape) else (dep == 0).to(tl.int32)
        c = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [d],
                                      dtype=tl.int64, is_pure=False, pack=1)
        tl.store(ptr + i, c)


# The finish's raise of the candidates' bound (bench/NOTES-sampler.md, run 24): by five
# level counts in one reduction, the histogram only when no level leaves at most CMAX;
# SONICSPEC_LEVEL_RAISE=0 (measurement) takes the histogram alone.
LEVEL_RAISE = tl.constexpr(os.environ.get("SONICSPEC_LEVEL_RAISE", "1") != "0")
# (count limit, the five fractions): `_raise_by_levels` takes the first entry whose limit the
# row's count does not exceed (bench/threshold_sim.py --levels simulates the same)
LEVEL_FRACTIONS = ((160, (0.015, 0.035, 0.06, 0.09, 0.13)), (256, (0.06, 0.1, 0.15, 0.2, 0.26)),
                   (1 << 30, (0.16, 0.23, 0.3, 0.4, 0.55)))
_LIM_FEW, _LIM_SOME = (tl.constexpr(limit) for limit, _ in LEVEL_FRACTIONS[:2])
_F_FEW, _F_SOME, _F_MANY = (tl.constexpr(fracs) for _, fracs in LEVEL_FRACTIONS)


@triton.jit
def _field(s, i: tl.constexpr):
    """Field i of five 12-bit counts packed in an int64 (`_raise_by_levels`)."""
    return ((s >> (12 * i)) & 4095).to(tl.int32)


@triton.jit
def _take_level(lim, n_c, cnt, cut, cap: tl.constexpr):
    """(cut, cnt) when that level holds at most cap, else (lim, n_c)."""
    take = cnt <= cap
    return tl.where(take, cut, lim), tl.where(take, cnt, n_c)


@triton.jit
def _level_fraction(n_c, i: tl.constexpr):
    """Fraction i of the set `LEVEL_FRACTIONS` picks for a row of n_c candidates."""
    return tl.where(n_c <= _LIM_FEW, _F_FEW[i],
                    tl.where(n_c <= _LIM_SOME, _F_SOME[i], _F_MANY[i]))


@triton.jit
def _raise_by_levels(cv, valid, lim, m0, n_c, CMAX: tl.constexpr):
    """A raised bound for the n_c > CMAX valid slots and the count above it: the counts
    above five bounds lim + (M - lim) * f in one reduction (12-bit fields), and the lowest
    bound that leaves at most CMAX; (lim, n_c) when none does (then the histogram). The
    fractions f depend on n_c (`LEVEL_FRACTIONS`); on randn * 8 rows with the kernel's
    thresholds, every raised row found a level and kept 63-128 slots, medians 114-122
    (`bench/threshold_sim.py --levels`). Any bound above lim keeps the list exact (every
    token above it is a candidate)."""
    span = tl.where(lim > float("-inf"), m0 - lim, 0.0)
    w = tl.zeros_like(cv).to(tl.int64)
    for i in tl.static_range(5):
        w |= (cv > lim + span * _level_fraction(n_c, i)).to(tl.int64) << (12 * i)
    s = tl.sum(tl.where(valid, w, 0), 0)
    lim2 = lim
    n_2 = n_c
    for i in tl.static_range(4, -1, -1):  # the highest level first: the lowest that fits wins
        lim2, n_2 = _take_level(lim2, n_2, _field(s, i), lim + span * _level_fraction(n_c, i),
                                CMAX)
    return lim2, n_2


@triton.jit
def _count3(fin, gb, l0: tl.constexpr, l1: tl.constexpr, l2: tl.constexpr):
    """Counts of finite tokens with gap bin <= each of three levels: one int64 sum of 21-bit
    fields (a row holds fewer than 2**21 tokens)."""
    v = ((gb <= l0).to(tl.int64) | ((gb <= l1).to(tl.int64) << 21)
         | ((gb <= l2).to(tl.int64) << 42))
    return tl.sum(tl.where(fin, v, 0), 0)


@triton.jit
def _pick3(packed, top, cap: tl.constexpr, l0: tl.constexpr, l1: tl.constexpr,
           l2: tl.constexpr):
    """The largest of the levels whose count is at most cap, else top."""
    top = tl.where((packed & 2097151) <= cap, l0, top)
    top = tl.where(((packed >> 21) & 2097151) <= cap, l1, top)
    return tl.where(((packed >> 42) & 2097151) <= cap, l2, top)


@triton.jit
def _resolve(v, ids, live, n_c, lim, m0, s_all, k, top_p, min_p, u_s, u_a, u_r, xd, inside,
             has_d, q_x, acc, tok_s, tok_r, q_ptr, qid_ptr, Q, b, j, K, R: tl.constexpr,
             VERIFY: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Filters and draws of one row from an id-ordered candidate list (v, ids; `live` marks
    the n_c real entries) that holds every token with x > lim. Returns (ok, token from p,
    acceptance of the draft, token from the residual; `verify` draws only the one the
    combine may read: from the residual where the draft is rejected, from p where there is
    no draft); ok is false when the k-th value, the top-p crossing or the min-p cut may lie
    at or below lim (then nothing else is valid).

    Complete rows (nothing outside the list, or only tokens whose weight exp(x - M) is 0 in
    float32, which never change a draw) resolve whatever the filters."""
    tiny = 1.1754943508222875e-38
    rr = tl.arange(0, R)
    complete = (m0 - lim) > 110.0
    ok = n_c <= R
    x_lo = float("-inf")
    # One sort of the values serves both filters: the kept set of top-k is a prefix of it,
    # and top-p's probabilities exp(v - M) / S, monotone in v, come out in the same
    # (descending) order, so their prefix sums are those of sorting the probabilities.
    vs = v
    if ((k > 0) & (k <= n_c)) | (top_p < 1):
        vs = tl.sort(v, 0, descending=True)
    if k > 0:
        if k <= n_c:
            x_lo = tl.max(tl.where(rr == k - 1, vs, float("-inf")), 0)
        else:
            ok = ok & complete
    kept0 = live & (v > float("-inf")) & (v >= x_lo)
    s_a = s_all
    if x_lo > float("-inf"):
        s_a = tl.sum(tl.where(kept0, _exp(v - m0), 0.0), 0)
    s_c = tl.maximum(s_a, tiny)
    pthr = 0.0
    if top_p < 1:
        n_k = tl.sum(kept0.to(tl.int32), 0)  # (the kept values are vs[:n_k])
        ps = tl.where(rr < n_k, _div(_exp(vs - m0), s_c), 0.0)
        csum = tl.cumsum(ps, 0)
        below = tl.sum(((rr < n_k) & (csum < top_p)).to(tl.int32), 0)
        if below >= n_k:
            ok = ok & complete
        c_idx = tl.minimum(below, n_k - 1)
        pthr = tl.max(tl.where(rr == c_idx, ps, 0.0), 0)
    ok = ok & (complete | (_keep(lim, x_lo, m0, s_c, pthr, min_p) == 0))
    if ok:
        w = tl.where(live & _keep(v, x_lo, m0, s_c, pthr, min_p), _exp(v - m0), 0.0)
        if VERIFY:
            # at most one draw (`draw_p` in `_finish_kernel`): from the residual (from p when
            # it is empty) at u_r where the row's draft is rejected, from p at u_s where the
            # row has no draft
            if has_d:
                wc = tl.maximum(tl.sum(w, 0), tiny)
                p_x = tl.where(inside, _div(tl.sum(tl.where(ids == xd, w, 0.0), 0), wc), 0.0)
                acc = u_a * q_x < p_x
                if acc == 0:
                    if Q_MODE == 0:
                        qv = (ids == xd).to(tl.float32)
                    else:  # (j < K here; the clamp keeps q's address in bounds regardless)
                        qv = _draft_q(q_ptr, qid_ptr, Q, b, tl.minimum(j, K - 1), K, ids, live,
                                      Q_MODE, BLOCK_Q)
                    r = tl.maximum(_div(w, wc) - qv, 0.0)
                    if tl.sum(r, 0) > 0:
                        w = r
                    tok_r = _pick_vec(w, ids, u_r, R)
            else:
                tok_s = _pick_vec(w, ids, u_s, R)
        else:
            tok_s = _pick_vec(w, ids, u_s, R)
    return ok, tok_s, acc, tok_r


@triton.jit
def _finish_kernel(logits_ptr, row_stride, V, K, K1, T, temp_ptr,
                   gmask_ptr, g_sb, g_sj, hasg_ptr, bits_ptr, pval_ptr, W,
                   topk_ptr, topp_ptr, minp_ptr, seed_ptr, pos_ptr,
                   draft_ptr, ndraft_ptr, q_ptr, qid_ptr, Q,
                   tmax_ptr, tsum_ptr, targ_ptr, tcnt_ptr, tbnd_ptr, cpair_ptr,
                   sv_ptr, sv2_ptr, tokens_ptr, acc_ptr, toks_ptr, tokr_ptr, path_ptr,
                   T_PAD: tl.constexpr, C: tl.constexpr, CMAX: tl.constexpr,
                   CMAX2: tl.constexpr,
                   BLOCK_V: tl.constexpr, HAS_FILTER: tl.constexpr, VERIFY: tl.constexpr,
                   Q_MODE: tl.constexpr, BLOCK_Q: tl.constexpr, HAS_ND: tl.constexpr,
                   HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr,
                   EARLY: tl.constexpr = False, STAMP: tl.constexpr = 0):
    """Stage 2, one program per row n = (request b, position j): everything after the read.

    Merges the tiles (row max M, total mass S, greedy argmax). Then, per row:
    - greedy: the argmax;
    - no filter: a tile by mass, then the token inside it (one tile re-read);
    - filter: the candidates with x > L (L = the largest tile bound, raised until at most
      CMAX remain: by level counts, else a histogram of the gaps) are every token with x > L, so
      top-k, top-p and min-p are exact from them when the k-th value, the top-p crossing
      token and the min-p cut all lie above L; the token is drawn among them;
    - otherwise (flat rows, dense/sparse draft laws without a filter) the slow path: exact
      bisection and full passes over the row in this program.
    `sample` writes the token; `verify` writes per row the acceptance of its draft and the
    token `_combine_kernel` may read there (`draw_p`): from the residual (RESIDUAL stream)
    in a row whose draft is rejected, from p (SAMPLE stream) in a row without a draft.
    `path`: 0 greedy, 1 candidates, 2 tiles, 3 slow (bisection), 4 second chance (two passes
    over the row collect up to CMAX2 tokens)."""
    n = tl.program_id(0)
    st = sv2_ptr + n.to(tl.int64) * CMAX2 + CMAX2 - STAMP_SLOTS  # (STAMP: clock readings)
    _stamp(st, 0, n, STAMP)
    if not EARLY:
        _after_prior()
    b = n // K1
    j = n % K1
    # (EARLY: the row's settings, inputs of the whole sequence, before the wait for the tile
    # kernel, as the tile kernel reads the logits before its own wait: `_after_prior`)
    temp_raw = tl.load(temp_ptr + b)
    _stamp(st, 1, temp_raw, STAMP)
    greedy = temp_raw == 0
    temp = tl.where(greedy, 1.0, temp_raw)
    has_g = tl.load(hasg_ptr + b).to(tl.int32)
    k = tl.load(topk_ptr + b)
    top_p = tl.load(topp_ptr + b)
    min_p = tl.load(minp_ptr + b)
    seed = tl.load(seed_ptr + b)
    pos = tl.load(pos_ptr + b) + j
    filtered = _filtered(temp_raw, k, top_p, min_p)
    if EARLY:
        _after_prior()
    tiles = tl.arange(0, T_PAD)
    tv = tiles < T
    o = n.to(tl.int64) * T_PAD
    cs = tl.arange(0, C)
    coff = (o + tiles)[:, None] * C + cs[None, :]
    if HAS_FILTER and EARLY:
        # every slot of the real tiles with the stats, in flight together (also in rows
        # without a filter, which do not use them: a load that waited for the settings
        # would be placed after the stats' first use, a round trip later)
        cp0 = _slots(cpair_ptr, coff, tv)
    tm = tl.load(tmax_ptr + o + tiles, mask=tv, other=float("-inf"))
    ts = tl.load(tsum_ptr + o + tiles, mask=tv, other=0.0)
    ta = tl.load(targ_ptr + o + tiles, mask=tv, other=2147483647)
    if HAS_FILTER:  # the candidates' counts and bounds, with the stats: no wait on the
        # row's settings first (unfiltered rows of such a batch read them and do not use them)
        cnt_t = tl.load(tcnt_ptr + o + tiles, mask=tv, other=0)
        tb = tl.load(tbnd_ptr + o + tiles, mask=tv, other=float("-inf"))
    big_m = tl.max(tm, 0)
    m0 = tl.where(big_m > float("-inf"), big_m, 0.0)
    arg = tl.min(tl.where(tm == big_m, ta, 2147483647), 0)
    arg = tl.where(arg == 2147483647, 0, arg)
    tmass = tl.where(tm > float("-inf"), _exp(tm - m0) * ts, 0.0)
    s_all = tl.sum(tmass, 0)
    _stamp(st, 2, s_all, STAMP)
    tiny = 1.1754943508222875e-38
    xd = -1
    has_d = j < 0
    if VERIFY:
        if HAS_ND:
            has_d = j < tl.load(ndraft_ptr + b)
        else:
            has_d = j < K
        xd = tl.load(draft_ptr + b * K + j, mask=j < K, other=-1).to(tl.int32)
    inside = (xd >= 0) & (xd < V)
    # At most one draw a row: `_combine_kernel` reads tok_r (the residual's) only in a row
    # whose draft is rejected and tok_s (p's) only in the row past the last draft, so rows
    # with a draft skip p's draw and accepted rows the residual's (the tokens they skip
    # stay placeholders).
    draw_p = has_d == 0
    u_s = _uniform(seed, pos, 0)
    u_a = _uniform(seed, pos, 1)
    u_r = _uniform(seed, pos, 2)
    q_x = _q_at(q_ptr, qid_ptr, Q, b, j, K, xd, inside, Q_MODE, BLOCK_Q)
    tok_s = arg
    tok_r = arg
    acc = has_d & inside & (xd == arg)
    path = 0
    slow = j < 0
    x_lo = float("-inf")
    s_c = tl.maximum(s_all, tiny)
    pthr = 0.0
    minp = 0.0
    if HAS_FILTER:  # noqa: SIM102 - a constexpr branch around a runtime one
        if filtered:
            path = 1
            # Every slot of the real tiles at once, without waiting for the counts (slots
            # past a tile's count hold stale values, masked below): one round trip less.
            if not EARLY:
                cp0 = _slots(cpair_ptr, coff, tv)
            cp = tl.reshape(cp0, [T_PAD * C])
            # bit 24 of a tile's count: its slots past the rows' maxima came from the atomic
            # counter, in no id order
            unordered = tl.max(cnt_t & 16777216, 0) != 0
            cnt_t = cnt_t & 16777215
            # a tile that selected more than C tokens kept only C: trust its max alone
            lim = tl.max(tl.where(cnt_t > C, tm, tb), 0)
            cmask = tl.reshape(tv[:, None] & (cs[None, :] < tl.minimum(cnt_t, C)[:, None]),
                               [T_PAD * C])
            cp = tl.where(cmask, cp, NO_PAIR)
            cv = _pair_value(cp)
            valid = cmask & (cv > lim)
            n_c = tl.sum(valid.to(tl.int32), 0)
            _stamp(st, 3, n_c, STAMP)
            if STAMP:
                tl.store(st + STAMP_COUNT, n_c.to(tl.int64))
            if LEVEL_RAISE and (T_PAD * C < 4096):  # noqa: SIM102 - constexpr around runtime
                if n_c > CMAX:  # raise L by level counts
                    lim, n_c = _raise_by_levels(cv, valid, lim, m0, n_c, CMAX)
                    valid = valid & (cv > lim)
            if n_c > CMAX:  # (still) raise L: a log-spaced histogram of the gap to M (`_gap_bin`)
                gb = _gap_bin(m0 - cv, 64)
                cc = tl.cumsum(tl.histogram(gb, 64, mask=valid), 0)
                top = tl.max(tl.where(cc <= CMAX, tl.arange(0, 64), -1), 0)
                lim = tl.maximum(lim, tl.max(tl.where(valid & (gb > top), cv, float("-inf")),
                                             0))
                valid = valid & (cv > lim)
                n_c = tl.sum(valid.to(tl.int32), 0)
            _stamp(st, 8, n_c, STAMP)
            # compact the survivors (tile by tile, each tile's row maxima in row order: id
            # order), then, if some tile's slots came from its atomic counter, order them by
            # id (one int64 sort of id << 32 | value bits; padding sorts last)
            slot = tl.cumsum(valid.to(tl.int32), 0) - 1  # (through a per-row scratch)
            _stamp(st, 9, slot, STAMP)
            rr = tl.arange(0, CMAX)
            _scatter64(sv_ptr + n.to(tl.int64) * CMAX + slot, cp, valid & (slot < CMAX))
            tl.debug_barrier()
            live = rr < n_c
            pair = tl.load(sv_ptr + n.to(tl.int64) * CMAX + rr, mask=live,
                           other=9223372036854775807)
            _stamp(st, 4, pair, STAMP)
            if unordered:
                pair = tl.sort(pair, 0)
            _stamp(st, 5, pair, STAMP)
            v, ids = _pair_unpack(pair, live)
            ok, tok_s, acc, tok_r = _resolve(
                v, ids, live, n_c, lim, m0, s_all, k, top_p, min_p, u_s, u_a, u_r, xd, inside,
                has_d, q_x, acc, tok_s, tok_r, q_ptr, qid_ptr, Q, b, j, K, CMAX, VERIFY, Q_MODE,
                BLOCK_Q)
            _stamp(st, 6, tok_s, STAMP)
            if ok == 0:
                slow = j >= 0
    if (temp_raw != 0) & (filtered == 0):
        path = 2
        if draw_p:
            tsel, rest = _choose_tile(tmass, u_s, T_PAD)
            tok_s = _in_tile(logits_ptr, row_stride, V, n, b, j, K, tsel, rest, temp, gmask_ptr,
                             g_sb, g_sj, has_g, bits_ptr, pval_ptr, W,
                             x_lo, m0, s_c, pthr, minp, j < 0, s_c, xd, q_ptr, qid_ptr, Q,
                             BLOCK_V, Q_MODE, BLOCK_Q, HAS_GRAMMAR, HAS_PATCH)
        if VERIFY:  # noqa: SIM102
            if has_d:
                if Q_MODE == 0:
                    w_x = _weight_at(logits_ptr, row_stride, V, n, b, j, K1, xd, temp, gmask_ptr,
                                     g_sb, g_sj, has_g, bits_ptr, pval_ptr, W, x_lo, m0, s_c,
                                     pthr, minp, HAS_GRAMMAR, HAS_PATCH)
                    acc = u_a * q_x < tl.where(inside, _div(w_x, s_c), 0.0)
                    if acc == 0:  # (an accepted row's residual is never read)
                        rm = tl.maximum(tl.where(tiles == xd // BLOCK_V, tmass - w_x, tmass), 0.0)
                        r_tot = tl.sum(rm, 0)
                        use_r = r_tot > 0
                        tsel, rest = _choose_tile(tl.where(use_r, rm, tmass), u_r, T_PAD)
                        rest = tl.where(use_r, rest / s_c.to(tl.float64), rest)
                        tok_r = _in_tile(logits_ptr, row_stride, V, n, b, j, K, tsel, rest, temp,
                                         gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W, x_lo,
                                         m0, s_c, pthr, minp, use_r,
                                         s_c, xd, q_ptr, qid_ptr, Q, BLOCK_V, Q_MODE, BLOCK_Q,
                                         HAS_GRAMMAR, HAS_PATCH)
                else:
                    slow = j >= 0
    if HAS_FILTER:  # noqa: SIM102 - a constexpr branch around a runtime one
        if slow & filtered:
            # Second chance, two passes over the row in this program: counts at twelve gap
            # levels below M, then every token above the widest level holding at most CMAX2 is
            # collected (in id order) and resolved like the candidates.
            ar = tl.arange(0, BLOCK_V)
            c0 = tl.full((), 0, tl.int64)
            c1 = tl.full((), 0, tl.int64)
            c2 = tl.full((), 0, tl.int64)
            c3 = tl.full((), 0, tl.int64)
            for t in range(T):
                x = _processed(logits_ptr, n, b, j, K1, t * BLOCK_V + ar, V, row_stride, temp,
                               gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W,
                               HAS_GRAMMAR, HAS_PATCH)
                fin = x > float("-inf")
                gb = _gap_bin(m0 - x, 64)
                c0 += _count3(fin, gb, 15, 19, 23)
                c1 += _count3(fin, gb, 25, 27, 29)
                c2 += _count3(fin, gb, 31, 33, 35)
                c3 += _count3(fin, gb, 39, 47, 63)
            lvl = _pick3(c0, -1, CMAX2, 15, 19, 23)
            lvl = _pick3(c1, lvl, CMAX2, 25, 27, 29)
            lvl = _pick3(c2, lvl, CMAX2, 31, 33, 35)
            lvl = _pick3(c3, lvl, CMAX2, 39, 47, 63)
            if lvl >= 0:
                got = 0
                bound = float("-inf")
                base2 = sv2_ptr + n.to(tl.int64) * CMAX2
                for t in range(T):
                    offs = t * BLOCK_V + ar
                    x = _processed(logits_ptr, n, b, j, K1, offs, V, row_stride, temp,
                                   gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W,
                                   HAS_GRAMMAR, HAS_PATCH)
                    sel = (x > float("-inf")) & (_gap_bin(m0 - x, 64) <= lvl)
                    slot2 = got + tl.cumsum(sel.to(tl.int32), 0) - 1
                    tl.store(base2 + slot2, _pair(x, offs), mask=sel & (slot2 < CMAX2))
                    got += tl.sum(sel.to(tl.int32), 0)
                    bound = tl.maximum(bound, tl.max(tl.where(sel, float("-inf"), x), 0))
                tl.debug_barrier()
                r2 = tl.arange(0, CMAX2)
                live2 = r2 < got
                pair = tl.load(base2 + r2, mask=live2, other=0)
                v2, ids2 = _pair_unpack(pair, live2)
                ok2, ts2, acc2, tr2 = _resolve(
                    v2, ids2, live2, got, bound, m0, s_all, k, top_p, min_p, u_s, u_a, u_r, xd,
                    inside, has_d, q_x, acc, tok_s, tok_r, q_ptr, qid_ptr, Q, b, j, K, CMAX2,
                    VERIFY, Q_MODE, BLOCK_Q)
                if ok2:
                    tok_s = ts2
                    acc = acc2
                    tok_r = tr2
                    slow = j < 0
                    path = 4
    if slow:
        path = 3
        if filtered:
            x_lo, s_c, pthr = _search(logits_ptr, row_stride, V, n, b, j, K1, T, temp,
                                      gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W,
                                      k, top_p, m0, BLOCK_V, HAS_GRAMMAR, HAS_PATCH)
            minp = min_p
        ar = tl.arange(0, BLOCK_V)
        wm = tl.zeros([T_PAD], tl.float32)
        for t in range(T):
            x = _processed(logits_ptr, n, b, j, K1, t * BLOCK_V + ar, V, row_stride, temp,
                           gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W, HAS_GRAMMAR,
                           HAS_PATCH)
            ws = tl.sum(tl.where(_keep(x, x_lo, m0, s_c, pthr, minp), _exp(x - m0), 0.0), 0)
            wm = tl.where(tiles == t, ws, wm)
        w_tot = tl.sum(wm, 0)
        wc = tl.maximum(w_tot, tiny)
        if draw_p:
            tsel, rest = _choose_tile(wm, u_s, T_PAD)
            tok_s = _in_tile(logits_ptr, row_stride, V, n, b, j, K, tsel, rest, temp, gmask_ptr,
                             g_sb, g_sj, has_g, bits_ptr, pval_ptr, W,
                             x_lo, m0, s_c, pthr, minp, j < 0, wc, xd, q_ptr, qid_ptr, Q,
                             BLOCK_V, Q_MODE, BLOCK_Q, HAS_GRAMMAR, HAS_PATCH)
        if VERIFY:  # noqa: SIM102
            if has_d:
                w_x = _weight_at(logits_ptr, row_stride, V, n, b, j, K1, xd, temp, gmask_ptr, g_sb,
                                 g_sj, has_g, bits_ptr, pval_ptr, W,
                                 x_lo, m0, s_c, pthr, minp, HAS_GRAMMAR, HAS_PATCH)
                acc = u_a * q_x < tl.where(inside, _div(w_x, wc), 0.0)
                if acc == 0:  # (an accepted row's residual is never read)
                    rm = tl.zeros([T_PAD], tl.float32)
                    for t in range(T):
                        offs = t * BLOCK_V + ar
                        x = _processed(logits_ptr, n, b, j, K1, offs, V, row_stride, temp,
                                       gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W,
                                       HAS_GRAMMAR, HAS_PATCH)
                        w = tl.where(_keep(x, x_lo, m0, s_c, pthr, minp), _exp(x - m0), 0.0)
                        if Q_MODE == 0:
                            q = (offs == xd).to(tl.float32)
                        else:
                            q = _draft_q(q_ptr, qid_ptr, Q, b, j, K, offs, offs < V, Q_MODE,
                                         BLOCK_Q)
                        rs = tl.sum(tl.maximum(_div(w, wc) - q, 0.0), 0)
                        rm = tl.where(tiles == t, rs, rm)
                    r_tot = tl.sum(rm, 0)
                    use_r = r_tot > 0
                    tsel, rest = _choose_tile(tl.where(use_r, rm, wm), u_r, T_PAD)
                    tok_r = _in_tile(logits_ptr, row_stride, V, n, b, j, K, tsel, rest, temp,
                                     gmask_ptr, g_sb, g_sj, has_g, bits_ptr, pval_ptr, W, x_lo, m0,
                                     s_c, pthr, minp, use_r, wc, xd,
                                     q_ptr, qid_ptr, Q, BLOCK_V, Q_MODE, BLOCK_Q,
                                     HAS_GRAMMAR, HAS_PATCH)
    tl.store(path_ptr + n, path)
    _stamp(st, 7, tok_s, STAMP)
    if VERIFY:
        tl.store(acc_ptr + n, acc.to(tl.int32))
        tl.store(toks_ptr + n, tok_s)
        tl.store(tokr_ptr + n, tok_r)
    else:
        tl.store(tokens_ptr + b, tok_s.to(tl.int64))


@triton.jit
def _combine_kernel(draft_ptr, ndraft_ptr, acc_ptr, toks_ptr, tokr_ptr, tokens_ptr, nacc_ptr,
                    nemit_ptr, K, K1, K1_PAD: tl.constexpr, HAS_ND: tl.constexpr):
    """One program per request: the acceptance chain over its rows (cut at the first
    rejection or at num_draft) and the emitted token: from the residual after a rejection,
    else from p at the bonus position. Writes num_accepted and num_emitted (one more; here,
    not by a torch kernel after this one)."""
    _after_prior()
    b = tl.program_id(0)
    jj = tl.arange(0, K1_PAD)
    if HAS_ND:
        nd = tl.load(ndraft_ptr + b)
    else:
        nd = K
    a = tl.load(acc_ptr + b * K1 + jj, mask=jj < K, other=0)
    ok = (a != 0) & (jj < nd)
    e = tl.min(tl.where((ok == 0) & (jj < K1), jj, K1_PAD), 0)
    rejected = e < nd
    tok_e = tl.where(rejected, tl.load(tokr_ptr + b * K1 + e), tl.load(toks_ptr + b * K1 + e))
    xd = tl.load(draft_ptr + b * K + jj, mask=jj < K, other=-1)
    out = tl.where(jj < e, xd, tl.where(jj == e, tok_e.to(tl.int64), -1))
    tl.store(tokens_ptr + b * K1 + jj, out, mask=jj < K1)
    tl.store(nacc_ptr + b, e.to(tl.int64))
    tl.store(nemit_ptr + b, e.to(tl.int64) + 1)


def next_pow2(x: int) -> int:
    return triton.next_power_of_2(max(1, x))
