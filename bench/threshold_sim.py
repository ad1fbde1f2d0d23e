"""How the candidate threshold of `_thr_part` behaves on synthetic rows (CPU, no Triton):
for each vocabulary, rows of randn * scale logits, with and without a grammar that forbids
the first half of the vocabulary (as bench/sampler.py's workload), the same sample plan as
the kernel (`triton_backend.sample_plan`), and per row: the tokens above the threshold
(top-k 50 needs 50), and the most in one 2048-token tile against the C slots (more sends
the row to the slow path). With --levels: for the rows with more than CMAX tokens above
the threshold, the finish's raise by level counts (`triton_kernels.LEVEL_FRACTIONS`, the
bound L taken as the threshold): how many find no level (then the histogram) and how many
candidates the others keep. With --local R...: instead of the pre kernel's row threshold, each
tile's own bound (the R-th largest of its 32-token rows' maxima, the GPU's tiles:
`tri.block_v`): the finish's bound L is the max over the tiles' bounds (a tile above C takes its
max), and the tokens above L are the candidates it can trust. Measurement only.

    python bench/threshold_sim.py [--rows 2000] [--scale 8] [--levels] [--local 4 8 12]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path[0] = str(Path(__file__).resolve().parents[1])
from sampler import triton_backend as tri  # noqa: E402
from sampler import triton_kernels as tk  # noqa: E402

# the per-tile counts' tile: the GPU's BLOCK_V above V = 131072 (1024 below: `tri.block_v`)
TILE = 2048


def thresholds(x: torch.Tensor, vocab: int, with_max: bool = False):
    """The kernel's threshold of each row of x [rows, V] (before the temperature, by the
    rank statistic); with_max: also the sample's max (min-p's bound starts from it)."""
    plan = tri.sample_plan(vocab)
    stride, g_runs, rank = plan["STRIDE"], plan["G_RUNS"], plan["RANK"]
    ids = torch.arange(64 * g_runs)[:, None] * stride * 32 + torch.arange(32)[None, :]
    sampled = torch.where(ids < vocab, x[:, ids.clamp(max=vocab - 1)],
                          torch.tensor(float("-inf")))  # [rows, runs, 32]
    group = (torch.arange(64 * g_runs) // g_runs).expand(x.shape[0], -1)
    gmax = torch.full((x.shape[0], 64), float("-inf")).scatter_reduce(
        1, group, sampled.amax(-1), "amax")
    live = (gmax > float("-inf")).sum(1)
    r = torch.clamp(torch.minimum(live // 2, torch.tensor(rank)), min=1)
    thr = gmax.sort(1, descending=True).values.gather(1, (r - 1)[:, None])
    return (thr, gmax.amax(1, keepdim=True)) if with_max else thr


def synthetic(rows: int, vocab: int, scale: float, grammar: bool) -> torch.Tensor:
    """rows of randn * scale logits [rows, V]; with grammar, the first half of the vocabulary
    (whole 32-token words, as bench/sampler.py's bitmask) forbidden."""
    x = torch.randn(rows, vocab) * scale
    if grammar:
        x[:, : (vocab + 31) // 32 // 2 * 32] = float("-inf")
    return x


def levels(x: torch.Tensor, thr: torch.Tensor, cap: int) -> tuple[int, int, list[int]]:
    """The level raise on the rows of x [rows, V] with more than cap tokens above their
    threshold thr [rows, 1]: (rows raised, rows with no level, counts kept by the others)."""
    raised = fell = 0
    kept = []
    m0 = x.amax(1, keepdim=True)
    for r in range(x.shape[0]):
        n_c = int((x[r] > thr[r]).sum())
        if n_c <= cap:
            continue
        raised += 1
        fracs = next(f for limit, f in tk.LEVEL_FRACTIONS if n_c <= limit)
        span = float(m0[r] - thr[r])
        counts = [int((x[r] > thr[r] + span * f).sum()) for f in fracs]
        fit = [c for c in counts if c <= cap]
        if fit:
            kept.append(fit[0])
        else:
            fell += 1
    return raised, fell, kept


def main_levels(rows: int, scale: float) -> None:
    print(f"{'V':>7} {'grammar':>7} | raised  no level | kept: min   p1  p10  med  max")
    for vocab in (32000, 128256, 262144):
        for grammar in (False, True):
            x = synthetic(rows, vocab, scale, grammar)
            raised, fell, kept = levels(x, thresholds(x, vocab), tri.CMAX)
            q = torch.quantile(torch.tensor(kept, dtype=torch.float32),
                               torch.tensor([0.0, 0.01, 0.1, 0.5, 1.0])).int().tolist()
            print(f"{vocab:>7} {str(grammar):>7} | {raised:6d} {fell:9d} | "
                  + " ".join(f"{v:4d}" for v in q), flush=True)


def local_bound(x: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of x [rows, V]: the finish's bound L if each tile (the GPU's, `tri.block_v`)
    kept its tokens above its own bound, the rank-th largest of its rows' (32 tokens) maxima;
    and the most tokens any tile kept. A tile keeping more than its C slots trusts only its
    max."""
    rows, vocab = x.shape
    block = tri.block_v(vocab)
    tiles = -(-vocab // block)
    xp = torch.nn.functional.pad(x, (0, tiles * block - vocab), value=float("-inf"))
    xp = xp.view(rows, tiles, block // 32, 32)
    top = xp.amax(-1).sort(-1, descending=True).values
    bound = top[:, :, rank - 1]
    kept = (xp > bound[..., None, None]).sum((-1, -2))
    tb = torch.where(kept > tri.slots(tiles), top[:, :, 0], bound)
    return tb.amax(1), kept.amax(1)


def main_local(rows: int, scale: float, ranks: list[int]) -> None:
    vocab = 32000
    block = tri.block_v(vocab)
    print(f"V = {vocab}, tiles of {block}, C = {tri.slots(-(-vocab // block))}; tokens above L")
    print(f"{'grammar':>7} {'R':>3} | min   p1  med  max | P(<50)  max/tile")
    for grammar in (False, True):
        x = synthetic(rows, vocab, scale, grammar)
        for rank in ranks:
            lim, most = local_bound(x, rank)
            count = (x > lim[:, None]).sum(1)
            q = torch.quantile(count.float(), torch.tensor([0.0, 0.01, 0.5, 1.0]))
            print(f"{str(grammar):>7} {rank:>3} | " + " ".join(f"{v:4d}" for v in q.int().tolist())
                  + f" | {float((count < 50).float().mean()):6.4f}  {int(most.max()):8d}",
                  flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--scale", type=float, default=8.0)
    ap.add_argument("--levels", action="store_true")
    ap.add_argument("--local", type=int, nargs="*", help="tile-local bounds of these ranks")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.local:
        main_local(args.rows, args.scale, args.local)
        return
    if args.levels:
        main_levels(args.rows, args.scale)
        return
    print(f"{'V':>7} {'grammar':>7} {'C':>3} | above the threshold: min   p1  med  p99  max | "
          f"P(<50)  max/tile  P(tile > C)")
    for vocab in (32000, 128256, 262144):
        tiles = -(-vocab // TILE)
        c = tri.slots(tiles)
        for grammar in (False, True):
            x = synthetic(args.rows, vocab, args.scale, grammar)
            above = x > thresholds(x, vocab)
            count = above.sum(1)
            per_tile = torch.nn.functional.pad(above, (0, tiles * TILE - vocab)).view(
                args.rows, tiles, TILE).sum(-1).amax(1)
            q = torch.quantile(count.float(), torch.tensor([0.0, 0.01, 0.5, 0.99, 1.0]))
            print(f"{vocab:>7} {str(grammar):>7} {c:>3} | "
                  + " ".join(f"{v:4d}" for v in q.int().tolist())
                  + f" | {float((count < 50).float().mean()):6.4f}  {int(per_tile.max()):8d}"
                  f"  {float((per_tile > c).float().mean()):11.4f}", flush=True)


if __name__ == "__main__":
    main()
