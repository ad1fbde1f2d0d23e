"""Drawing one token from weights with a given uniform, and logprobs of the processed law."""

from __future__ import annotations

import torch

from sampler.rng import Stream, uniform


def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF in token-id order: the smallest i with cumsum(w)[i] > u * sum(w), the
    prefix sums and the total in float64 (so the draw does not hinge on a float32 summation
    order: the fused kernels sum by tiles).

    weights: [N, V] float32 >= 0 (unnormalised); u: [N] float32 in (0, 1). If rounding
    finds no such i, the last token with positive weight (id 0 if there is none). Returns [N]
    int64. Never returns a zero-weight token when some weight is positive.
    """
    cdf = weights.to(torch.float64).cumsum(1)
    target = (u.to(torch.float64) * cdf[:, -1])[:, None]
    idx = torch.searchsorted(cdf, target.contiguous(), right=True).squeeze(1)
    positive = weights > 0
    last = weights.shape[1] - 1 - positive.flip(1).to(torch.int8).argmax(1)
    last = torch.where(positive.any(1), last, 0)
    return torch.where(idx < weights.shape[1], idx, last)


def sample_from_probs(probs: torch.Tensor, seed: torch.Tensor, position: torch.Tensor,
                      stream: Stream = Stream.DRAFT) -> torch.Tensor:
    """Draw from probs [N, V] (any nonnegative weights) with uniform(seed, position, stream).

    For the engine's draft model: draft token j of a request is drawn with its seed at
    absolute position pos0 + j on the DRAFT stream, independent of every verify stream.
    """
    return inverse_cdf(probs.to(torch.float32), uniform(seed, position, stream))


def log_probs(filtered: torch.Tensor) -> torch.Tensor:
    """log of the renormalised processed law: l - l_max - log(sum exp(l - l_max))."""
    return torch.log_softmax(filtered, dim=-1)


def top_logprobs(logp: torch.Tensor, tokens: torch.Tensor, num: torch.Tensor, max_num: int,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token logprob [...], top ids [..., n], top logprobs [..., n]) with per-row n = num;
    columns past a row's own n are padding (-1, -inf). tokens < 0 give -inf."""
    safe = tokens.clamp(min=0)
    tok_lp = logp.gather(-1, safe[..., None]).squeeze(-1).masked_fill(tokens < 0, float("-inf"))
    values, ids = logp.topk(max_num, dim=-1)
    pad = torch.arange(max_num, device=logp.device) >= num[..., None]
    return tok_lp, ids.masked_fill(pad, -1), values.masked_fill(pad, float("-inf"))
