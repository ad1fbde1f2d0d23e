"""Triton kernels of the fused sampler (the launch sequence lives in `triton_backend`).

Rows: one per (request b, position j), n = b * K1 + j (K1 = 1 for `sample`, K+1 for
`verify`); per-request settings are read at b. Every kernel takes the row count from its grid
(never a constexpr), so one compilation serves every batch size; constexprs depend only on V,
K and the dtype. Processed values are recomputed on the fly from the logits by `_processed`
(grammar bit, sparse penalty/bias patch, temperature): no [B, V] processed tensor is written.

Sparse patch: tokens touched by history, logit bias or earlier drafts get a bit in `bits`
[N, ceil(V/32)] (zeroed per call) and, at those ids only, an int32 code in `cnt` [N, V]
(sum over entries of 2**20 + generated count: seen iff >= 2**20) and a bias in `bias` [N, V].
Both [N, V] buffers are allocated but only touched at the patched ids.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl
from triton.language.extra import libdevice

from sampler import _triton_interpret

_triton_interpret.install()

SEEN = 1 << 20
KEY_MIN = -(1 << 63)
# Bit-exact float32 arithmetic of the processing, as torch does it: libdevice expf (torch.exp's
# CUDA implementation; tl.exp is ex2.approx(x * log2 e), off by several ulp for large |x|)
# and IEEE division (Triton's `/` on float32 is div.full, 2 ulp). The interpreter has no
# libdevice and numpy is IEEE already: plain exp and `/`. SONICSPEC_FAST_MATH=1 restores
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
def _key(x):
    """Order-preserving int32 key of float32 x (-0.0 treated as +0.0)."""
    bits = (x + 0.0).to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@triton.jit
def _unkey(k):
    bits = tl.where(k >= 0, k, k ^ 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _processed(logits_ptr, n, b, j, offs, V, row_stride, temp,
               gmask_ptr, g_sb, g_sj, has_g, bits_ptr, cnt_ptr, bias_ptr, W,
               rep, freq, pres, HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """Processed, temperature-scaled float32 logits of row n at token ids offs (-inf outside
    [0, V)): grammar -> repetition -> frequency/presence -> bias -> / temp (1 for greedy)."""
    inb = (offs < V) & (offs >= 0)
    x = tl.load(logits_ptr + n.to(tl.int64) * row_stride + offs, mask=inb,
                other=float("-inf")).to(tl.float32)
    if HAS_GRAMMAR:
        word = tl.load(gmask_ptr + b.to(tl.int64) * g_sb + j * g_sj + offs // 32, mask=inb,
                       other=-1)
        ok = ((word >> (offs % 32)) & 1) != 0
        x = tl.where(ok | (has_g == 0), x, float("-inf"))
    if HAS_PATCH:
        pw = tl.load(bits_ptr + n.to(tl.int64) * W + offs // 32, mask=inb, other=0)
        hit = inb & (((pw >> (offs % 32)) & 1) != 0)
        code = tl.load(cnt_ptr + n.to(tl.int64) * V + offs, mask=hit, other=0)
        bv = tl.load(bias_ptr + n.to(tl.int64) * V + offs, mask=hit, other=0.0)
        seen = code >= 1048576
        cnt = (code & 1048575).to(tl.float32)
        y = tl.where(seen, tl.where(x > 0, _div(x, rep), x * rep), x)
        y = y - freq * cnt
        y = y - pres * (cnt > 0).to(tl.float32)
        y = y + bv
        x = tl.where(hit, y, x)
    x = _div(x, temp)
    return tl.where(inb, x, float("-inf"))


@triton.jit
def _keep(x, x_lo, m0, s_a, pthr, minp):
    """Kept by top-k/top-p/min-p given the row's thresholds (see `_row_kernel`)."""
    e = _exp(x - m0)
    return (x > float("-inf")) & (x >= x_lo) & (_div(e, s_a) >= pthr) & (e >= minp)


@triton.jit
def _patch_kernel(hist_ids_ptr, hist_cnt_ptr, hist_cap, bias_ids_ptr, bias_val_ptr, bias_cap,
                  draft_ptr, ndraft_ptr, K, K1, bits_ptr, cnt_ptr, bias_ptr, V, W,
                  HAS_HIST: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_EXTRA: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """One program per row n: zero cnt/bias at the touched ids, then (after a barrier)
    accumulate codes, biases and bits with atomics (duplicates sum, as scatter_add does)."""
    n = tl.program_id(0)
    b = n // K1
    j = n % K1
    cbase = cnt_ptr + n.to(tl.int64) * V
    bbase = bias_ptr + n.to(tl.int64) * V
    hb = tl.arange(0, BLOCK_H)
    kb = tl.arange(0, BLOCK_K)
    if HAS_EXTRA:
        nd = tl.load(ndraft_ptr + b)
        xd = tl.load(draft_ptr + b * K + kb, mask=kb < K, other=-1)
        xd_ok = (kb < j) & (kb < nd) & (xd >= 0) & (xd < V)
    for phase in tl.static_range(2):
        if HAS_HIST:
            for start in range(0, hist_cap, BLOCK_H):
                h = start + hb
                ids = tl.load(hist_ids_ptr + b.to(tl.int64) * hist_cap + h, mask=h < hist_cap,
                              other=-1)
                ok = (ids >= 0) & (ids < V)
                if phase == 0:
                    tl.store(cbase + ids, tl.zeros_like(ids).to(tl.int32), mask=ok)
                    tl.store(bbase + ids, tl.zeros_like(ids).to(tl.float32), mask=ok)
                else:
                    c = tl.load(hist_cnt_ptr + b.to(tl.int64) * hist_cap + h, mask=ok, other=0)
                    tl.atomic_add(cbase + ids, (c + 1048576).to(tl.int32), mask=ok)
                    tl.atomic_or(bits_ptr + n.to(tl.int64) * W + ids // 32,
                                 (1 << (ids % 32)).to(tl.int32), mask=ok)
        if HAS_BIAS:
            for start in range(0, bias_cap, BLOCK_H):
                h = start + hb
                ids = tl.load(bias_ids_ptr + b.to(tl.int64) * bias_cap + h, mask=h < bias_cap,
                              other=-1)
                ok = (ids >= 0) & (ids < V)
                if phase == 0:
                    tl.store(cbase + ids, tl.zeros_like(ids).to(tl.int32), mask=ok)
                    tl.store(bbase + ids, tl.zeros_like(ids).to(tl.float32), mask=ok)
                else:
                    v = tl.load(bias_val_ptr + b.to(tl.int64) * bias_cap + h, mask=ok, other=0.0)
                    tl.atomic_add(bbase + ids, v, mask=ok)
                    tl.atomic_or(bits_ptr + n.to(tl.int64) * W + ids // 32,
                                 (1 << (ids % 32)).to(tl.int32), mask=ok)
        if HAS_EXTRA:
            if phase == 0:
                tl.store(cbase + xd, tl.zeros_like(xd).to(tl.int32), mask=xd_ok)
                tl.store(bbase + xd, tl.zeros_like(xd).to(tl.float32), mask=xd_ok)
            else:
                tl.atomic_add(cbase + xd, tl.full(xd.shape, 1048577, tl.int32), mask=xd_ok)
                tl.atomic_or(bits_ptr + n.to(tl.int64) * W + xd // 32,
                             (1 << (xd % 32)).to(tl.int32), mask=xd_ok)
        if phase == 0:
            tl.debug_barrier()


@triton.jit
def _tile_kernel(logits_ptr, row_stride, V, K1, temp_ptr,
                 gmask_ptr, g_sb, g_sj, hasg_ptr, bits_ptr, cnt_ptr, bias_ptr, W,
                 rep_ptr, freq_ptr, pres_ptr,
                 tmax_ptr, tsum_ptr, targ_ptr, cand_ptr,
                 T_PAD: tl.constexpr, C: tl.constexpr, BLOCK_V: tl.constexpr,
                 HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr, HAS_CAND: tl.constexpr,
                 TOPK: tl.constexpr):
    """Stage 1, one program per (row n, tile t): reads the tile once and writes the tile max,
    sum exp(x - max), the lowest id of the max, and the C largest (value, id) as int64 keys
    (value key << 32 | (2**31 - 1 - id): descending = value desc, id asc)."""
    n = tl.program_id(0)
    t = tl.program_id(1)
    b = n // K1
    j = n % K1
    temp = tl.load(temp_ptr + b)
    temp = tl.where(temp == 0, 1.0, temp)
    has_g = tl.load(hasg_ptr + b).to(tl.int32)
    rep = tl.load(rep_ptr + b)
    freq = tl.load(freq_ptr + b)
    pres = tl.load(pres_ptr + b)
    offs = t * BLOCK_V + tl.arange(0, BLOCK_V)
    x = _processed(logits_ptr, n, b, j, offs, V, row_stride, temp, gmask_ptr, g_sb, g_sj,
                   has_g, bits_ptr, cnt_ptr, bias_ptr, W, rep, freq, pres,
                   HAS_GRAMMAR, HAS_PATCH)
    m = tl.max(x, 0)
    m0 = tl.where(m > float("-inf"), m, 0.0)
    s = tl.sum(_exp(x - m0), 0)
    arg = tl.min(tl.where((x == m) & (offs < V), offs, 2147483647), 0)
    o = n.to(tl.int64) * T_PAD + t
    tl.store(tmax_ptr + o, m)
    tl.store(tsum_ptr + o, s)
    tl.store(targ_ptr + o, arg)
    if HAS_CAND:
        keys = (_key(x).to(tl.int64) << 32) | (2147483647 - offs).to(tl.int64)
        keys = tl.where(offs < V, keys, -9223372036854775807 - 1)
        if TOPK:  # bitonic top-C in registers (one pass)
            tl.store(cand_ptr + o * C + tl.arange(0, C), tl.topk(keys, C))
        else:  # C rounds of max-and-remove: the same set (the interpreter's topk is huge)
            for c in tl.static_range(C):
                top = tl.max(keys, 0)
                tl.store(cand_ptr + o * C + c, top)
                keys = tl.where(keys == top, -9223372036854775807 - 1, keys)


@triton.jit
def _row_kernel(tmax_ptr, tsum_ptr, targ_ptr, cand_ptr, K1, T,
                temp_ptr, topk_ptr, topp_ptr, minp_ptr,
                m0_ptr, xlo_ptr, sa_ptr, pthr_ptr, minpo_ptr, arg_ptr, status_ptr, mass_ptr,
                T_PAD: tl.constexpr, C: tl.constexpr, HAS_FILTER: tl.constexpr,
                NEED_LAW: tl.constexpr):
    """Stage 2, one program per row: merge tiles; the row max M, the greedy argmax, and the
    filter thresholds when they are exact from the candidates (status 1) or a flag for the
    exact search (status 2). Status 0: no filter, the tile masses are written here.

    Candidates are exact above `safe` (the largest C-th candidate of any tile): every token
    with a larger value is among them. Top-k is exact when its k-th value is above `safe`;
    top-p when its crossing token is above `safe` or the top-k set is inside the candidates.
    """
    n = tl.program_id(0)
    b = n // K1
    tiles = tl.arange(0, T_PAD)
    tv = tiles < T
    o = n.to(tl.int64) * T_PAD
    tm = tl.load(tmax_ptr + o + tiles, mask=tv, other=float("-inf"))
    ts = tl.load(tsum_ptr + o + tiles, mask=tv, other=0.0)
    ta = tl.load(targ_ptr + o + tiles, mask=tv, other=2147483647)
    m = tl.max(tm, 0)
    m0 = tl.where(m > float("-inf"), m, 0.0)
    arg = tl.min(tl.where(tm == m, ta, 2147483647), 0)
    arg = tl.where(arg == 2147483647, 0, arg)
    tmass = tl.where(tm > float("-inf"), _exp(tm - m0) * ts, 0.0)
    s_all = tl.sum(tmass, 0)
    temp = tl.load(temp_ptr + b)
    k = tl.load(topk_ptr + b)
    top_p = tl.load(topp_ptr + b)
    min_p = tl.load(minp_ptr + b)
    status = 0
    x_lo = float("-inf")
    s_a = s_all
    pthr = 0.0
    if HAS_FILTER:
        active = (k > 0) | (top_p < 1) | (min_p > 0)
        if not NEED_LAW:
            active = active & (temp != 0)
        if active:
            status = 1
            r = tl.arange(0, T_PAD * C)
            keys = tl.load(cand_ptr + o * C + r, mask=r < T * C, other=-9223372036854775807 - 1)
            vals = tl.where(keys == -9223372036854775807 - 1, float("-inf"),
                            _unkey((keys >> 32).to(tl.int32)))
            sv = tl.sort(vals, 0, descending=True)
            # safe = the largest of the tiles' C-th candidates (both extractions store them
            # in descending order: tl.topk ends with a descending bitonic merge)
            last = tl.load(cand_ptr + (o + tiles) * C + (C - 1), mask=tv,
                           other=-9223372036854775807 - 1)
            lastv = tl.where(last == -9223372036854775807 - 1, float("-inf"),
                             _unkey((last >> 32).to(tl.int32)))
            safe = tl.max(lastv, 0)
            a_inside = safe == float("-inf")
            if k > 0:
                kth = tl.max(tl.where(r == k - 1, sv, float("-inf")), 0)
                exact = (k <= T * C) & (safe < kth)
                x_lo = kth
                a_inside = exact
                in_a = (sv > float("-inf")) & (sv >= kth)
                s_a = tl.sum(tl.where(in_a, _exp(sv - m0), 0.0), 0)
                if not exact:
                    status = 2
            if top_p < 1:
                in_a = (sv > float("-inf")) & (sv >= x_lo)
                s_c = tl.maximum(s_a, 1.1754943508222875e-38)
                p = tl.where(in_a, _div(_exp(sv - m0), s_c), 0.0)
                cs = tl.cumsum(p, 0)
                n_a = tl.sum(in_a.to(tl.int32), 0)
                below = tl.sum((in_a & (cs < top_p)).to(tl.int32), 0)
                c_idx = tl.minimum(below, n_a - 1)
                pthr = tl.max(tl.where(r == c_idx, p, 0.0), 0)
                x_c = tl.max(tl.where(r == c_idx, sv, float("-inf")), 0)
                ok = a_inside | ((below < n_a) & (x_c > safe))
                if not ok:
                    status = 2
            if status == 1:
                # Kept set inside the candidates (every token above `safe` is one; `_keep` is
                # monotone in x, so if `safe` is not kept no other token is): the tile masses
                # are sums over candidates and `_mass_kernel` skips the row (status 3).
                s_c = tl.maximum(s_a, 1.1754943508222875e-38)
                if not _keep(safe, x_lo, m0, s_c, pthr, min_p):
                    status = 3
                    wc = tl.where(_keep(vals, x_lo, m0, s_c, pthr, min_p), _exp(vals - m0), 0.0)
                    tl.store(mass_ptr + o + tiles, tl.sum(tl.reshape(wc, [T_PAD, C]), 1),
                             mask=tv)
    tl.store(m0_ptr + n, m0)
    tl.store(xlo_ptr + n, x_lo)
    tl.store(sa_ptr + n, tl.maximum(s_a, 1.1754943508222875e-38))
    tl.store(pthr_ptr + n, pthr)
    tl.store(minpo_ptr + n, tl.where(status > 0, min_p, 0.0))
    tl.store(arg_ptr + n, arg)
    tl.store(status_ptr + n, status)
    if status == 0:
        tl.store(mass_ptr + o + tiles, tmass, mask=tv)


@triton.jit
def _search_kernel(logits_ptr, row_stride, V, K1, T, temp_ptr,
                   gmask_ptr, g_sb, g_sj, hasg_ptr, bits_ptr, cnt_ptr, bias_ptr, W,
                   rep_ptr, freq_ptr, pres_ptr, topk_ptr, topp_ptr,
                   m0_ptr, xlo_ptr, sa_ptr, pthr_ptr, status_ptr,
                   BLOCK_V: tl.constexpr, HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """Exact path for rows with status 2 (others return at once): bisection over the
    order-preserving int32 keys, each step one pass over the row. Top-k: the largest key m
    with count(key >= m) >= k is the k-th largest value. Top-p: the smallest key m with
    mass(key > m) < top_p; keep key >= m (= "mass strictly above < top_p")."""
    n = tl.program_id(0)
    if tl.load(status_ptr + n) != 2:
        return
    b = n // K1
    j = n % K1
    temp = tl.load(temp_ptr + b)
    temp = tl.where(temp == 0, 1.0, temp)
    has_g = tl.load(hasg_ptr + b).to(tl.int32)
    rep = tl.load(rep_ptr + b)
    freq = tl.load(freq_ptr + b)
    pres = tl.load(pres_ptr + b)
    k = tl.load(topk_ptr + b)
    top_p = tl.load(topp_ptr + b)
    m0 = tl.load(m0_ptr + n)
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
                x = _processed(logits_ptr, n, b, j, offs, V, row_stride, temp, gmask_ptr,
                               g_sb, g_sj, has_g, bits_ptr, cnt_ptr, bias_ptr, W, rep, freq,
                               pres, HAS_GRAMMAR, HAS_PATCH)
                cnt += tl.sum(((_key(x) >= mid) & (offs < V)).to(tl.int32), 0)
            lo = tl.where(cnt >= k, mid, lo)
            hi = tl.where(cnt >= k, hi, mid - 1)
        x_lo = _unkey(lo)
    s_a = 0.0
    for t in range(T):
        offs = t * BLOCK_V + ar
        x = _processed(logits_ptr, n, b, j, offs, V, row_stride, temp, gmask_ptr, g_sb, g_sj,
                       has_g, bits_ptr, cnt_ptr, bias_ptr, W, rep, freq, pres,
                       HAS_GRAMMAR, HAS_PATCH)
        s_a += tl.sum(tl.where((x > float("-inf")) & (x >= x_lo), _exp(x - m0), 0.0), 0)
    s_a = tl.maximum(s_a, 1.1754943508222875e-38)
    if top_p < 1:
        lo = _key(tl.full((), float("-inf"), tl.float32))
        hi = 2147483647
        for _ in range(32):
            mid = ((lo.to(tl.int64) + hi.to(tl.int64)) >> 1).to(tl.int32)
            mass = 0.0
            for t in range(T):
                offs = t * BLOCK_V + ar
                x = _processed(logits_ptr, n, b, j, offs, V, row_stride, temp, gmask_ptr,
                               g_sb, g_sj, has_g, bits_ptr, cnt_ptr, bias_ptr, W, rep, freq,
                               pres, HAS_GRAMMAR, HAS_PATCH)
                keep = (x > float("-inf")) & (x >= x_lo) & (_key(x) > mid)
                mass += tl.sum(tl.where(keep, _div(_exp(x - m0), s_a), 0.0), 0)
            good = mass < top_p
            hi = tl.where(good, mid, hi)
            lo = tl.where(good, lo, mid + 1)
        x_lo = tl.maximum(x_lo, _unkey(lo))
    tl.store(xlo_ptr + n, x_lo)
    tl.store(sa_ptr + n, s_a)
    tl.store(pthr_ptr + n, 0.0)
    tl.store(status_ptr + n, 1)


@triton.jit
def _mass_kernel(logits_ptr, row_stride, V, K1, temp_ptr,
                 gmask_ptr, g_sb, g_sj, hasg_ptr, bits_ptr, cnt_ptr, bias_ptr, W,
                 rep_ptr, freq_ptr, pres_ptr,
                 m0_ptr, xlo_ptr, sa_ptr, pthr_ptr, minp_ptr, status_ptr, mass_ptr,
                 T_PAD: tl.constexpr, BLOCK_V: tl.constexpr,
                 HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """Per (row, tile) with a filter whose kept set is not inside the candidates (status 1):
    the tile's kept mass sum exp(x - M). Status 0 and 3 rows have their masses already."""
    n = tl.program_id(0)
    t = tl.program_id(1)
    if tl.load(status_ptr + n) != 1:
        return
    b = n // K1
    j = n % K1
    temp = tl.load(temp_ptr + b)
    temp = tl.where(temp == 0, 1.0, temp)
    offs = t * BLOCK_V + tl.arange(0, BLOCK_V)
    x = _processed(logits_ptr, n, b, j, offs, V, row_stride, temp, gmask_ptr, g_sb, g_sj,
                   tl.load(hasg_ptr + b).to(tl.int32), bits_ptr, cnt_ptr, bias_ptr, W,
                   tl.load(rep_ptr + b), tl.load(freq_ptr + b), tl.load(pres_ptr + b),
                   HAS_GRAMMAR, HAS_PATCH)
    m0 = tl.load(m0_ptr + n)
    keep = _keep(x, tl.load(xlo_ptr + n), m0, tl.load(sa_ptr + n), tl.load(pthr_ptr + n),
                 tl.load(minp_ptr + n))
    tl.store(mass_ptr + n.to(tl.int64) * T_PAD + t, tl.sum(tl.where(keep, _exp(x - m0), 0.0), 0))


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
def _accept_kernel(logits_ptr, row_stride, V, K, K1, temp_ptr,
                   gmask_ptr, g_sb, g_sj, hasg_ptr, bits_ptr, cnt_ptr, bias_ptr, W,
                   rep_ptr, freq_ptr, pres_ptr, seed_ptr, pos_ptr,
                   draft_ptr, ndraft_ptr, q_ptr, qid_ptr, Q,
                   m0_ptr, xlo_ptr, sa_ptr, pthr_ptr, minp_ptr, arg_ptr, mass_ptr,
                   nacc_ptr, tokens_ptr,
                   T_PAD: tl.constexpr, Q_MODE: tl.constexpr, BLOCK_Q: tl.constexpr,
                   HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """One program per request: the acceptance chain over its drafts (accept iff u * q(x) <
    p(x), u on the ACCEPT stream; greedy: x == argmax), writes n_acc and the accepted drafts."""
    b = tl.program_id(0)
    temp_raw = tl.load(temp_ptr + b)
    greedy = temp_raw == 0
    temp = tl.where(greedy, 1.0, temp_raw)
    has_g = tl.load(hasg_ptr + b).to(tl.int32)
    rep = tl.load(rep_ptr + b)
    freq = tl.load(freq_ptr + b)
    pres = tl.load(pres_ptr + b)
    seed = tl.load(seed_ptr + b)
    pos0 = tl.load(pos_ptr + b)
    nd = tl.load(ndraft_ptr + b)
    tiles = tl.arange(0, T_PAD)
    lane = tl.arange(0, 2)
    n_acc = 0
    going = 1
    for j in range(K):
        n = b * K1 + j
        xs = tl.load(draft_ptr + b * K + j)
        inside = (xs >= 0) & (xs < V)
        offs = tl.where(lane == 0, xs, -1).to(tl.int32)
        x = _processed(logits_ptr, n, b, j, offs, V, row_stride, temp, gmask_ptr, g_sb, g_sj,
                       has_g, bits_ptr, cnt_ptr, bias_ptr, W, rep, freq, pres,
                       HAS_GRAMMAR, HAS_PATCH)
        m0 = tl.load(m0_ptr + n)
        keep = _keep(x, tl.load(xlo_ptr + n), m0, tl.load(sa_ptr + n), tl.load(pthr_ptr + n),
                     tl.load(minp_ptr + n))
        w = tl.sum(tl.where(keep & (lane == 0), _exp(x - m0), 0.0), 0)
        total = tl.sum(tl.load(mass_ptr + n.to(tl.int64) * T_PAD + tiles), 0)
        p_x = tl.where(inside, _div(w, tl.maximum(total, 1.1754943508222875e-38)), 0.0)
        if Q_MODE == 0:
            q_x = 1.0
        else:
            q_x = tl.sum(_draft_q(q_ptr, qid_ptr, Q, b, j, K, offs,
                                  (lane == 0) & inside, Q_MODE, BLOCK_Q), 0)
        u = _uniform(seed, pos0 + j, 1)
        ok = tl.where(greedy, inside & (xs == tl.load(arg_ptr + n)), u * q_x < p_x)
        ok = ok & (j < nd)
        going = going & ok.to(tl.int32)
        n_acc += going
        tl.store(tokens_ptr + b * K1 + j, tl.where(going != 0, xs, -1))
    tl.store(tokens_ptr + b * K1 + K, -1)
    tl.store(nacc_ptr + b, n_acc.to(tl.int64))


@triton.jit
def _residual_kernel(logits_ptr, row_stride, V, K, K1, temp_ptr,
                     gmask_ptr, g_sb, g_sj, hasg_ptr, bits_ptr, cnt_ptr, bias_ptr, W,
                     rep_ptr, freq_ptr, pres_ptr, draft_ptr, ndraft_ptr, q_ptr, qid_ptr, Q,
                     m0_ptr, xlo_ptr, sa_ptr, pthr_ptr, minp_ptr, mass_ptr, nacc_ptr,
                     rmass_ptr, T_PAD: tl.constexpr, BLOCK_V: tl.constexpr,
                     Q_MODE: tl.constexpr, BLOCK_Q: tl.constexpr,
                     HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """Per (request, tile) of a stochastic row that rejected at e = n_acc: the tile mass of
    max(p_e - q_e, 0) (p_e = w / total as in the torch backend)."""
    b = tl.program_id(0)
    t = tl.program_id(1)
    e = tl.load(nacc_ptr + b).to(tl.int32)
    temp_raw = tl.load(temp_ptr + b)
    if (e >= tl.load(ndraft_ptr + b)) | (temp_raw == 0):
        return
    n = b * K1 + e
    offs = t * BLOCK_V + tl.arange(0, BLOCK_V)
    x = _processed(logits_ptr, n, b, e, offs, V, row_stride, temp_raw, gmask_ptr, g_sb, g_sj,
                   tl.load(hasg_ptr + b).to(tl.int32), bits_ptr, cnt_ptr, bias_ptr, W,
                   tl.load(rep_ptr + b), tl.load(freq_ptr + b), tl.load(pres_ptr + b),
                   HAS_GRAMMAR, HAS_PATCH)
    m0 = tl.load(m0_ptr + n)
    keep = _keep(x, tl.load(xlo_ptr + n), m0, tl.load(sa_ptr + n), tl.load(pthr_ptr + n),
                 tl.load(minp_ptr + n))
    tiles = tl.arange(0, T_PAD)
    total = tl.maximum(tl.sum(tl.load(mass_ptr + n.to(tl.int64) * T_PAD + tiles), 0),
                       1.1754943508222875e-38)
    pe = _div(tl.where(keep, _exp(x - m0), 0.0), total)
    if Q_MODE == 0:
        xd = tl.load(draft_ptr + b * K + e)
        q = (offs == xd).to(tl.float32)
    else:
        q = _draft_q(q_ptr, qid_ptr, Q, b, e, K, offs, offs < V, Q_MODE, BLOCK_Q)
    r = tl.maximum(pe - q, 0.0)
    tl.store(rmass_ptr + b.to(tl.int64) * T_PAD + t, tl.sum(r, 0))


@triton.jit
def _pick_kernel(logits_ptr, row_stride, V, K, K1, T, temp_ptr,
                 gmask_ptr, g_sb, g_sj, hasg_ptr, bits_ptr, cnt_ptr, bias_ptr, W,
                 rep_ptr, freq_ptr, pres_ptr, seed_ptr, pos_ptr,
                 draft_ptr, ndraft_ptr, q_ptr, qid_ptr, Q,
                 m0_ptr, xlo_ptr, sa_ptr, pthr_ptr, minp_ptr, arg_ptr, mass_ptr, rmass_ptr,
                 nacc_ptr, tokens_ptr,
                 T_PAD: tl.constexpr, BLOCK_V: tl.constexpr, HAS_DRAFT: tl.constexpr,
                 Q_MODE: tl.constexpr, BLOCK_Q: tl.constexpr,
                 HAS_GRAMMAR: tl.constexpr, HAS_PATCH: tl.constexpr):
    """One program per request: the emitted token at e = n_acc. Greedy: the argmax. Else an
    inverse CDF in token-id order with one uniform: the tile by cumulative tile mass, then
    the token inside that tile (re-read once). Residual at a rejection (RESIDUAL stream),
    else p_e (SAMPLE stream; also when the residual is all zero, with the RESIDUAL uniform)."""
    b = tl.program_id(0)
    e = 0
    rejected = False
    if HAS_DRAFT:
        e = tl.load(nacc_ptr + b).to(tl.int32)
        rejected = e < tl.load(ndraft_ptr + b)
    n = b * K1 + e
    temp_raw = tl.load(temp_ptr + b)
    greedy = temp_raw == 0
    tiles = tl.arange(0, T_PAD)
    o = n.to(tl.int64) * T_PAD
    wm = tl.load(mass_ptr + o + tiles)
    use_r = False
    if HAS_DRAFT:
        rm = tl.load(rmass_ptr + b.to(tl.int64) * T_PAD + tiles)
        use_r = rejected & (tl.sum(rm, 0) > 0) & (temp_raw != 0)
        tmass = tl.where(use_r, rm, wm)
    else:
        tmass = wm
    seed = tl.load(seed_ptr + b)
    pos = tl.load(pos_ptr + b) + e
    u = tl.where(rejected, _uniform(seed, pos, 2), _uniform(seed, pos, 0))
    cm = tl.cumsum(tmass, 0)
    target = u * tl.sum(tmass, 0)
    # first positive tile whose inclusive prefix exceeds the target (a parallel scan need not
    # be monotone in the last bit, so "count(cm <= target)" could land on a zero tile)
    tsel = tl.min(tl.where((cm > target) & (tmass > 0), tiles, T_PAD), 0)
    last_pos = tl.max(tl.where(tmass > 0, tiles, -1), 0)
    tsel = tl.where(tsel >= T_PAD, last_pos, tsel)
    tsel = tl.maximum(tsel, 0)
    before = tl.sum(tl.where(tiles < tsel, tmass, 0.0), 0)
    rest = target - before
    offs = tsel * BLOCK_V + tl.arange(0, BLOCK_V)
    x = _processed(logits_ptr, n, b, e, offs, V, row_stride, tl.where(greedy, 1.0, temp_raw),
                   gmask_ptr, g_sb, g_sj, tl.load(hasg_ptr + b).to(tl.int32), bits_ptr,
                   cnt_ptr, bias_ptr, W, tl.load(rep_ptr + b), tl.load(freq_ptr + b),
                   tl.load(pres_ptr + b), HAS_GRAMMAR, HAS_PATCH)
    m0 = tl.load(m0_ptr + n)
    keep = _keep(x, tl.load(xlo_ptr + n), m0, tl.load(sa_ptr + n), tl.load(pthr_ptr + n),
                 tl.load(minp_ptr + n))
    w = tl.where(keep, _exp(x - m0), 0.0)
    if HAS_DRAFT:  # noqa: SIM102 - a constexpr branch around a runtime one
        if use_r:
            total = tl.maximum(tl.sum(wm, 0), 1.1754943508222875e-38)
            if Q_MODE == 0:
                q = (offs == tl.load(draft_ptr + b * K + e)).to(tl.float32)
            else:
                q = _draft_q(q_ptr, qid_ptr, Q, b, e, K, offs, offs < V, Q_MODE, BLOCK_Q)
            w = tl.maximum(_div(w, total) - q, 0.0)
    cdf = tl.cumsum(w, 0)
    first = tl.min(tl.where((cdf > rest) & (w > 0), offs, 2147483647), 0)
    lastw = tl.max(tl.where(w > 0, offs, -1), 0)
    tok = tl.where(first < 2147483647, first, lastw)
    tok = tl.where(lastw < 0, 0, tok)
    tok = tl.where(greedy, tl.load(arg_ptr + n), tok)
    tl.store(tokens_ptr + b * K1 + e, tok.to(tl.int64))


def next_pow2(x: int) -> int:
    return triton.next_power_of_2(max(1, x))
