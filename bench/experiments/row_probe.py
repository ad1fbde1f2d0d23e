"""Probe (timing only, not a sampler): one program per row holding the whole row, at V = 32000.

The sampler's chain (pre -> tile -> finish, plus combine for verify) spreads a row over 32
tile programs; at V = 32000 the chain's latency is what misses the issue's FlashInfer
targets. This probe times the other design, one program a row with the row in registers
(BLOCK = 32768) in one kernel, by parts (MODE):

- `read` (0): load, temperature, max, sum of exp; 16 warps, the row as [256, 128];
- `thr` (3): + a threshold from the 256 groups' maxima (the 56th largest, by a 256 x 256
  count: a rank statistic like the pre kernel's, from registers instead of a sample);
- `compact-1d` (4): + the tokens above it compacted in id order (a cumsum over the row as one
  [32768] tensor) into a scratch row (as [256, 128] the compaction needs 256 KB of shared
  memory and cannot launch);
- `full-1d` (1): + the list reloaded and `_resolve` (the finish's own top-k / top-p / min-p
  and float64 draw, CMAX = 128 wide) for a top-k 40 + top-p 0.95 row;
- `patch+full-1d` (2): + a patch-like step first (512 history ids' logits gathered,
  penalised, stored, their bits set by atomics, a CTA barrier, every token's bit word loaded
  and the patched values gathered where set);
- `R values` (8) and `resolve` (7): R logits alone, then `_resolve` on them (R = 128 / 64,
  8 / 4 warps): the resolve's own cost.

Rows 1 / 16 / 64 / 256 (sample's B) and 80 / 320 / 1280 (verify's B (K + 1) at B = 16 / 64 /
256), graph replays with the L2 evicted before each (as `bench/sampler.py` times them),
beside the sampler's sample (B = rows) and verify (B = rows / 5) on the issue mix.

Run 114 (H200, us; `results/sampler-row-probe-run114.log`): the read alone takes 7.6 / 9.7 /
18.6 us at 1 / 64 / 256 rows (sampler: sample 14.3 / 20.6 / 34.3), but the compaction and
resolve inside one program take 84-260 us: a whole row's per-token instructions issue on
one SM (the compiled full kernel holds ~12 000 SASS instructions a thread on 16 warps, with
spills), where the tile kernel spreads them over 32 SMs. The design is not pursued.

    python bench/experiments/row_probe.py [--rows 1 16 64 256 80 320 1280]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path[0] = str(Path(__file__).resolve().parents[2])
from bench.sampler import SCALE, case_inputs, timed  # noqa: E402
from sampler import Sampler  # noqa: E402
from sampler import triton_kernels as tk  # noqa: E402


@triton.jit
def _row_probe(x_ptr, V, hist_ptr, H, bits_ptr, pval_ptr, W, cand_v_ptr, cand_i_ptr, out_ptr,
               k, top_p, min_p, MODE: tl.constexpr, BLOCK: tl.constexpr, R: tl.constexpr,
               BLOCK_H: tl.constexpr, FLAT: tl.constexpr):
    """MODE 0 read, 3 + threshold, 4 + compaction, 1 + resolve, 2 patch + 1; 7 `_resolve` of
    the row's first R values alone, 8 their max alone (the launch's cost). FLAT: the row as
    one [BLOCK] tensor (else [256, BLOCK / 256])."""
    n = tl.program_id(0)
    G: tl.constexpr = 256
    L: tl.constexpr = BLOCK // 256
    if FLAT:
        offs = tl.arange(0, BLOCK)
    else:
        offs = tl.arange(0, G)[:, None] * L + tl.arange(0, L)[None, :]
    row = n.to(tl.int64) * V
    rr = tl.arange(0, R)
    base = n.to(tl.int64) * R
    u_s = tk._uniform(n.to(tl.int64), n.to(tl.int64) * 0, 0)
    no = n < 0
    tok0 = (n * 0).to(tl.int32)
    if MODE >= 7:  # R values of the row alone: 8 their max (a launch's cost), 7 _resolve
        v = tl.load(x_ptr + row + rr) / 0.8
        m0 = tl.max(v, 0)
        if MODE == 8:
            tl.store(out_ptr + n, m0.to(tl.int64))
        else:
            s_all = tl.sum(tl.exp(v - m0), 0)
            ok, tok, acc, tok_r = tk._resolve(v, rr, rr < R, R, float("-inf"), m0, s_all, k,
                                              top_p, min_p, u_s, u_s, u_s, tok0 - 1, no, no,
                                              0.0, no, tok0, tok0, cand_v_ptr, cand_i_ptr, 0,
                                              n, 0, 0, R, False, 0, 8)
            tl.store(out_ptr + n, tl.where(ok, tok, -1).to(tl.int64))
        return
    x = tl.load(x_ptr + row + offs, mask=offs < V, other=float("-inf"),
                eviction_policy="evict_first")
    if MODE == 2:
        # the patch: history ids' logits, penalised, stored, their bits set
        hh = tl.arange(0, BLOCK_H)
        hid = tl.load(hist_ptr + n.to(tl.int64) * H + hh, mask=hh < H, other=0)
        hx = tl.load(x_ptr + row + hid, mask=hh < H, other=0.0)
        hv = tl.where(hx > 0, hx / 1.1, hx * 1.1) - 0.3
        tl.store(pval_ptr + row + hid, hv, mask=hh < H)
        tl.atomic_or(bits_ptr + n.to(tl.int64) * W + hid // 32, (1 << (hid % 32)).to(tl.int32),
                     mask=hh < H, sem="relaxed")
        tl.debug_barrier()
        word = tl.load(bits_ptr + n.to(tl.int64) * W + offs // 32, mask=offs < V, other=0)
        hit = ((word >> (offs % 32)) & 1) != 0
        pv = tl.load(pval_ptr + row + offs, mask=hit, other=0.0)
        x = tl.where(hit, pv, x)
    x = x / 0.8
    if FLAT:
        m0 = tl.max(x, 0)
        s_all = tl.sum(tl.exp(x - m0), 0)
    else:
        m0 = tl.max(tl.max(x, 1), 0)
        s_all = tl.sum(tl.sum(tl.exp(x - m0), 1), 0)
    if MODE == 0:
        tl.store(out_ptr + n, (m0 + tl.log(s_all)).to(tl.int64))
    else:
        if FLAT:
            gm = tl.max(tl.reshape(x, (G, L)), 1)
        else:
            gm = tl.max(x, 1)
        reach = tl.sum((gm[:, None] >= gm[None, :]).to(tl.int32), 0)
        lim = tl.max(tl.where(reach >= 56, gm, float("-inf")), 0)
        if MODE == 3:
            tl.store(out_ptr + n, lim.to(tl.int64))
        else:
            above = x > lim
            if FLAT:
                slot = tl.cumsum(above.to(tl.int32), 0) - 1
                n_c = tl.sum(above.to(tl.int32), 0)
            else:
                gc = tl.sum(above.to(tl.int32), 1)
                go = tl.cumsum(gc, 0) - gc
                slot = tl.cumsum(above.to(tl.int32), 1) - 1 + go[:, None]
                n_c = tl.sum(gc, 0)
            tl.store(cand_v_ptr + base + slot, x, mask=above & (slot < R))
            tl.store(cand_i_ptr + base + slot, offs, mask=above & (slot < R))
            if MODE == 4:
                tl.store(out_ptr + n, n_c.to(tl.int64))
            else:
                tl.debug_barrier()
                live = rr < n_c
                v = tl.load(cand_v_ptr + base + rr, mask=live, other=float("-inf"))
                ids = tl.load(cand_i_ptr + base + rr, mask=live, other=0)
                ok, tok, acc, tok_r = tk._resolve(v, ids, live, n_c, lim, m0, s_all, k, top_p,
                                                  min_p, u_s, u_s, u_s, tok0 - 1, no, no, 0.0,
                                                  no, tok0, tok0, cand_v_ptr, cand_i_ptr, 0, n,
                                                  0, 0, R, False, 0, 8)
                tl.store(out_ptr + n, tl.where(ok, tok, -1).to(tl.int64))


def probe(x: torch.Tensor, hist: torch.Tensor, mode: int, warps: int, flat: bool = False,
          r: int = 128):
    rows, vocab = x.shape
    words = (vocab + 31) // 32
    bits = torch.zeros(rows, words, dtype=torch.int32, device=x.device)
    pval = torch.empty_like(x)
    cv = torch.empty(rows, r, dtype=torch.float32, device=x.device)
    ci = torch.empty(rows, r, dtype=torch.int32, device=x.device)
    out = torch.empty(rows, dtype=torch.int64, device=x.device)

    def run():
        ck = _row_probe[(rows,)](x, vocab, hist, hist.shape[1], bits, pval, words, cv, ci, out,
                            40, 0.95, 0.0, MODE=mode, BLOCK=triton.next_power_of_2(vocab), R=r,
                            BLOCK_H=triton.next_power_of_2(hist.shape[1]), FLAT=flat,
                            num_warps=warps)
        if ck is not None and hasattr(ck, "n_regs"):
            COMPILED[(mode, warps, flat, r)] = (ck.n_regs, ck.n_spills)
        return out
    return run


COMPILED: dict[tuple[int, int, bool, int], tuple[int, int]] = {}


# (name, MODE, FLAT, R, warps)
VARIANTS = [("read", 0, False, 128, 16), ("thr", 3, False, 128, 16),
            ("compact-1d", 4, True, 128, 16), ("full-1d", 1, True, 128, 16),
            ("patch+full-1d", 2, True, 128, 16), ("R values w8", 8, False, 128, 8),
            ("resolve128 w8", 7, False, 128, 8), ("resolve64 w8", 7, False, 64, 8),
            ("resolve128 w4", 7, False, 128, 4), ("resolve64 w4", 7, False, 64, 4)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64, 256, 80, 320, 1280])
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    SCALE[0] = 8.0  # the benchmark's peaked logits (`bench/sampler.py --scale 8`)
    sampler = Sampler(backend="triton")
    vocab = args.vocab
    print(f"V = {vocab}; graph replays, L2 evicted, median us")
    print("rows | sampler sample | sampler verify (B = rows/5) | "
          + " | ".join(name for name, *_ in VARIANTS))
    for rows in args.rows:
        logits, drafts, first, sb, vb = case_inputs(rows, vocab, "cuda")
        x = first.contiguous()
        hist = torch.randint(0, vocab, (rows, 512), device="cuda", dtype=torch.int32)
        cells = [f"{timed(partial(sampler.sample, first, sb), 'cuda', args.iters):.1f}"]
        if rows % 5 == 0:
            lg, dr, _, _, vb2 = case_inputs(rows // 5, vocab, "cuda")
            cells.append(f"{timed(partial(sampler.verify, lg, dr, vb2), 'cuda', args.iters):.1f}")
        else:
            cells.append("-")
        for name, mode, flat, r, w in VARIANTS:
            try:
                fn = probe(x, hist, mode, w, flat, r)
                got = fn()
                torch.cuda.synchronize()
                if mode in (1, 7) and rows == 1:
                    print(f"  ({name}: token {got.tolist()})", file=sys.stderr)
                cells.append(f"{timed(fn, 'cuda', args.iters):.1f}")
            except Exception as e:  # noqa: BLE001 - a probe: report and go on
                cells.append("err")
                print(f"  rows {rows} {name}: {type(e).__name__}: {e}"[:300], file=sys.stderr)
        print(f"{rows} | " + " | ".join(cells), flush=True)
    for (mode, w, flat, r), (regs, spills) in sorted(COMPILED.items()):
        print(f"  mode {mode} warps {w} flat {flat} R {r}: {regs} registers, {spills} bytes "
              "spilled")


if __name__ == "__main__":
    main()
