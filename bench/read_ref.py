"""The least a two-stage sampler of the issue's design costs: read the logits once and merge.

Stage 1, one program per (row, tile of 2048 tokens): load the tile (evict-first), keep its
max and sum of exp(x - max). Stage 2, one program per row: merge the tiles into the row's
log-sum-exp. No feature, no candidate, no draw: the issue's own probe ("reading the logits and
keeping each tile's max and sum of exponentials"), here as a baseline that `bench/sampler.py
--baselines` times with the same graph-replay method as the sampler (`read1`: stage 1 alone,
one launch; `read2`: both stages, two plain launches, without the programmatic dependent
launch that overlaps the sampler's kernels).

    TRITON_INTERPRET=1 python bench/read_ref.py   # CPU check against torch (small shapes)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048


@triton.jit
def _tile_stats(x_ptr, row_stride, V, tmax_ptr, tsum_ptr, T_PAD: tl.constexpr,
                BLOCK_V: tl.constexpr):
    r = tl.program_id(0)
    t = tl.program_id(1)
    offs = t * BLOCK_V + tl.arange(0, BLOCK_V)
    x = tl.load(x_ptr + r.to(tl.int64) * row_stride + offs, mask=offs < V, other=float("-inf"),
                eviction_policy="evict_first").to(tl.float32)
    m = tl.max(x, 0)
    s = tl.sum(tl.exp(x - m), 0)
    tl.store(tmax_ptr + r * T_PAD + t, m)
    tl.store(tsum_ptr + r * T_PAD + t, s)


@triton.jit
def _row_merge(tmax_ptr, tsum_ptr, T, out_ptr, T_PAD: tl.constexpr):
    r = tl.program_id(0)
    tt = tl.arange(0, T_PAD)
    m = tl.load(tmax_ptr + r * T_PAD + tt, mask=tt < T, other=float("-inf"))
    s = tl.load(tsum_ptr + r * T_PAD + tt, mask=tt < T, other=0.0)
    big = tl.max(m, 0)
    tl.store(out_ptr + r, big + tl.log(tl.sum(s * tl.exp(m - big), 0)))


def read_stats(logits: torch.Tensor, merge: bool = True,
               block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """logits [..., V] (rows contiguous along V): per row the tiles' maxima and sums [R, T_PAD]
    and, with merge, the rows' log-sum-exp [R] (float32)."""
    x = logits.reshape(-1, logits.shape[-1])
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, vocab = x.shape
    tiles = -(-vocab // block)
    t_pad = triton.next_power_of_2(tiles)
    tmax = torch.empty(rows, t_pad, dtype=torch.float32, device=x.device)
    tsum = torch.empty_like(tmax)
    _tile_stats[(rows, tiles)](x, x.stride(0), vocab, tmax, tsum, T_PAD=t_pad, BLOCK_V=block,
                               num_warps=4)
    if not merge:
        return tmax, tsum, None
    lse = torch.empty(rows, dtype=torch.float32, device=x.device)
    _row_merge[(rows,)](tmax, tsum, tiles, lse, T_PAD=t_pad, num_warps=1)
    return tmax, tsum, lse


if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 1000, generator=g) * 8
    _, _, lse = read_stats(logits, block=256)
    err = (lse - torch.logsumexp(logits.reshape(-1, 1000), -1)).abs().max().item()
    print(f"max |lse - torch.logsumexp| = {err:.2e}")
