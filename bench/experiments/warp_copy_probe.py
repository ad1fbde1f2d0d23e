"""Probe: the finish's resolve with each warp holding its own copy of the candidate list.

At small B the finish's resolve (`triton_kernels._resolve`: the value sort, top-k / top-p /
min-p and the float64 inverse-CDF draw over <= 128 candidates) is half of the finish's chain
(run 112: ~5800 of ~10 800 SM cycles at sample B = 1, V = 32000). On 8 warps a 128-wide list
is spread over all of them, so every sort stage, scan and reduction crosses the warps through
shared memory and a barrier. Earlier notes held that a list held by one warp "needs Gluon".
It does not: a [NW, R] tensor (NW = num_warps copies of the list, loaded with a 16-byte
vector a thread) gets Triton's blocked layout sizePerThread [1, 4], threadsPerWarp [1, 32],
warpsPerCTA [NW, 1], so every step along axis 1 stays inside a warp (shuffles, no barrier).
For sm_90 (PTX) the probe's 1-D resolve holds 36 `bar.sync`, its copies one.

Modes, one program a row, R = 128 candidates (values and ids in two 32-bit arrays; the
sampler's scratch holds int64 pairs, whose 8-byte vectors would split a copy over two warps):
- `load` (0): the values' max alone (the launch and the load: the baseline),
- `1d` (1): the sampler's own `_resolve` on the 1-D list, 8 warps (sample),
- `copies` (2): `_resolve_w` below, the same computation on [NW, R] along axis 1, with the
  resolve's data-dependent branches turned into selects (a copy cannot branch on a value
  that only a cross-warp reduction would make scalar); the token leaves through warp 0.
Both must give the same token on every row (checked at each size before timing; under
TRITON_INTERPRET=1 on the CPU, `--check` runs the check alone).

Run 210 (H200; `results/sampler-run210-warp-copy-probe.log`): the copies are slower at
every size. The resolve over the load takes 2.46 / 2.82 / 3.02 / 9.26 us in 1-D, and 2.85 /
3.71 / 4.98 / 17.31 us as copies, at 1 / 16 / 256 / 1280 rows. Fewer barriers do not make
a shorter chain: on one warp each step handles 4 entries a thread, and the sort's and the
scans' shuffle stages run one after another, where 8 warps split the entries and meet at a
barrier that costs little. The same knob inside the finish (`experiments/resolve-copies.diff`)
made sample 0.6-2.4 us slower and verify 2.7-9.5 us slower. Not kept.

    python bench/experiments/warp_copy_probe.py [--rows 1 16 80 256 1280] [--check]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path[0] = str(Path(__file__).resolve().parents[2])
from sampler import triton_kernels as tk  # noqa: E402

R = 128
NW = 8  # warps, and copies of the list


@triton.jit
def _pick_w(w, ids, u):
    """`triton_kernels._pick_ids` along axis 1 of [NW, R] copies: [NW, 1] ids."""
    w64 = w.to(tl.float64)
    cdf = tl.cumsum(w64, 1)
    target = u.to(tl.float64) * tl.sum(w64, 1, keep_dims=True)
    past = (cdf > target) & (w > 0)
    lo, hi = tl.reduce((tl.where(past, ids, 2147483647), tl.where(w > 0, ids, -1)), 1,
                       tk._min_max, keep_dims=True)
    return tl.where(hi < 0, 0, tl.where(lo < 2147483647, lo, hi))


@triton.jit
def _resolve_w(v, ids, live, n_c, lim, m0, s_all, k, top_p, min_p, u_s, R: tl.constexpr,
               NW: tl.constexpr):
    """`triton_kernels._resolve` (sample) on [NW, R] copies along axis 1: (ok, token), each
    [NW, 1], every copy equal."""
    tiny = 1.1754943508222875e-38
    rr = tl.arange(0, R)[None, :]
    complete = (m0 - lim) > 110.0
    ok = tl.full([NW, 1], 1, tl.int1) & (n_c <= R)
    x_lo = tl.full([NW, 1], float("-inf"), tl.float32)
    vs = v
    if ((k > 0) & (k <= n_c)) | (top_p < 1):
        vs = tl.sort(v, 1, descending=True)
    if k > 0:
        if k <= n_c:
            x_lo = tl.max(tl.where(rr == k - 1, vs, float("-inf")), 1, keep_dims=True)
        else:
            ok = ok & complete
    kept0 = live & (v > float("-inf")) & (v >= x_lo)
    s_k = tl.sum(tl.where(kept0, tk._exp(v - m0), 0.0), 1, keep_dims=True)
    s_c = tl.maximum(tl.where(x_lo > float("-inf"), s_k, s_all), tiny)
    pthr = tl.zeros([NW, 1], tl.float32)
    if top_p < 1:
        n_k = tl.sum(kept0.to(tl.int32), 1, keep_dims=True)
        ps = tl.where(rr < n_k, tk._div(tk._exp(vs - m0), s_c), 0.0)
        csum = tl.cumsum(ps, 1)
        below = tl.sum(((rr < n_k) & (csum < top_p)).to(tl.int32), 1, keep_dims=True)
        ok = ok & ((below < n_k) | complete)
        c_idx = tl.minimum(below, n_k - 1)
        pthr = tl.max(tl.where(rr == c_idx, ps, 0.0), 1, keep_dims=True)
    lim_w = lim + tl.zeros([NW, 1], tl.float32)  # (the interpreter's & wants equal ranks)
    ok = ok & (complete | (tk._keep(lim_w, x_lo, m0, s_c, pthr, min_p) == 0))
    w = tl.where(live & tk._keep(v, x_lo, m0, s_c, pthr, min_p), tk._exp(v - m0), 0.0)
    return ok, _pick_w(w, ids, u_s)


@triton.jit
def _probe(cv_ptr, ci_ptr, nc_ptr, lim_ptr, sall_ptr, k_ptr, topp_ptr, minp_ptr, out_ptr,
           MODE: tl.constexpr, R: tl.constexpr, NW: tl.constexpr):
    n = tl.program_id(0)
    base = n.to(tl.int64) * R
    n_c = tl.load(nc_ptr + n)
    lim = tl.load(lim_ptr + n)
    k = tl.load(k_ptr + n)
    top_p = tl.load(topp_ptr + n)
    min_p = tl.load(minp_ptr + n)
    s_all = tl.load(sall_ptr + n)
    u_s = tk._uniform(n.to(tl.int64) + 7, n.to(tl.int64) * 0, 0)
    if MODE == 2:
        rr = tl.arange(0, R)[None, :] + tl.zeros([NW, 1], tl.int32)
        live = rr < n_c
        v = tl.load(cv_ptr + base + rr, mask=live, other=float("-inf"))
        ids = tl.load(ci_ptr + base + rr, mask=live, other=0)
        m0 = tl.max(v, 1, keep_dims=True)
        ok, tok = _resolve_w(v, ids, live, n_c, lim, m0, s_all, k, top_p, min_p, u_s, R, NW)
        ww = tl.arange(0, NW)[:, None]
        tl.store(out_ptr + n + ww * 0, tl.where(ok, tok, -1).to(tl.int64), mask=ww == 0)
    else:
        rr = tl.arange(0, R)
        live = rr < n_c
        v = tl.load(cv_ptr + base + rr, mask=live, other=float("-inf"))
        m0 = tl.max(v, 0)
        if MODE == 0:
            tl.store(out_ptr + n, m0.to(tl.int64))
        else:
            ids = tl.load(ci_ptr + base + rr, mask=live, other=0)
            no = n < 0
            tok0 = (n * 0).to(tl.int32)
            ok, tok, acc, tok_r = tk._resolve(v, ids, live, n_c, lim, m0, s_all, k, top_p,
                                              min_p, u_s, u_s, u_s, tok0 - 1, no, no, 0.0,
                                              no, tok0, tok0, cv_ptr, ci_ptr, 0, n, 0, 0, R,
                                              False, 0, 8)
            tl.store(out_ptr + n, tl.where(ok, tok, -1).to(tl.int64))


def candidates(rows: int, device: str, vocab: int = 32000, seed: int = 0):
    """Per row an id-ordered candidate list like the finish's (n_c of R live, values of
    randn * 8 logits above a bound lim, the rest of the row's mass outside the list) and a
    filtered setting of the benchmark's kinds."""
    g = torch.Generator().manual_seed(seed)
    n_c = torch.randint(40, R + 1, (rows,), generator=g, dtype=torch.int32)
    ids = torch.sort(torch.rand(rows, vocab, generator=g).argsort(1)[:, :R], 1).values
    cv = torch.randn(rows, R, generator=g) * 8 + 20
    cv[torch.arange(R)[None, :] >= n_c[:, None]] = float("-inf")
    lim = cv.masked_fill(cv == float("-inf"), float("inf")).min(1).values - 0.5
    m0 = cv.max(1).values
    s_all = torch.exp(cv - m0[:, None]).sum(1) * 1.05
    kind = torch.randint(0, 4, (rows,), generator=g)
    k = torch.tensor([40, 0, 50, 0], dtype=torch.int32)[kind]
    top_p = torch.tensor([0.95, 0.9, 1.0, 1.0])[kind]
    min_p = torch.tensor([0.0, 0.0, 0.0, 0.05])[kind]
    return [t.to(device) for t in (cv.contiguous(), ids.to(torch.int32).contiguous(), n_c,
                                   lim, s_all, k, top_p, min_p)]


def probe(inputs, mode: int):
    rows = inputs[0].shape[0]
    out = torch.empty(rows, dtype=torch.int64, device=inputs[0].device)

    def run():
        ck = _probe[(rows,)](*inputs, out, MODE=mode, R=R, NW=NW, num_warps=NW)
        if hasattr(ck, "n_regs"):
            COMPILED[mode] = (ck.n_regs, ck.n_spills)
        return out
    return run


COMPILED: dict[int, tuple[int, int]] = {}


def check(inputs) -> int:
    """How many rows' tokens differ between the 1-D resolve and the copies."""
    rows = inputs[0].shape[0]
    a = probe(inputs, 1)().clone()
    b = probe(inputs, 2)().clone()
    bad = int((a != b).sum())
    print(f"rows {rows}: {bad} differ; tokens {a[:6].tolist()} ({int((a < 0).sum())} not ok)")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16, 80, 256, 1280])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--check", action="store_true", help="equality only (any device)")
    args = ap.parse_args()
    if args.check or not torch.cuda.is_available():
        device = "cpu" if os.environ.get("TRITON_INTERPRET") else "cuda"
        sys.exit(1 if sum(check(candidates(r, device, seed=r)) for r in args.rows) else 0)
    from bench.sampler import timed
    print(f"graph replays, L2 evicted, median us; R = {R}, {NW} warps")
    print("rows | load | 1d resolve | copies resolve | 1d - load | copies - load")
    for rows in args.rows:
        inputs = candidates(rows, "cuda", seed=rows)
        if check(inputs):
            raise SystemExit("copies differ from the 1-D resolve")
        t = [timed(probe(inputs, m), "cuda", args.iters) for m in (0, 1, 2)]
        print(f"{rows} | {t[0]:.2f} | {t[1]:.2f} | {t[2]:.2f} | {t[1] - t[0]:.2f} | "
              f"{t[2] - t[0]:.2f}", flush=True)
    for mode, (regs, spills) in sorted(COMPILED.items()):
        print(f"  mode {mode}: {regs} registers, {spills} bytes spilled")


if __name__ == "__main__":
    main()
