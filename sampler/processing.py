"""Logit processing, the reference specification: grammar -> penalties -> bias -> temperature
-> top-k -> top-p -> min-p. Pure PyTorch, float32, vectorised across rows (no per-row loop).

All functions take `logits: [N, V] float32` (not changed in place) and per-row settings
already expanded to N rows (one row per verify position). Stages no row needs are skipped by
the batch's host flags; a row whose setting is neutral is left bit-identical by its stage.
They never sync the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sampler.batch import SamplingBatch

NEG_INF = float("-inf")


@dataclass
class Processed:
    """scores: [N, V] after grammar/penalties/bias (greedy rows take argmax of these);
    filtered: [N, V] after temperature (1 for greedy rows) and top-k/top-p/min-p, -inf where
    removed; this is the log-weight of the distribution that is sampled."""

    scores: torch.Tensor
    filtered: torch.Tensor


def apply_grammar(logits: torch.Tensor, bitmask: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """bitmask: [N, ceil(V/32)] int32, bit i%32 of word i//32 = token i allowed; has: [N] bool."""
    vocab = logits.shape[1]
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    allowed = bits.flatten(1)[:, :vocab].bool() | ~has[:, None]
    return logits.masked_fill(~allowed, NEG_INF)


def history_counts(ids: torch.Tensor, counts: torch.Tensor, vocab: int,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense (seen [N, V] bool, generated count [N, V] float32) from sparse ids [N, L]
    (-1 or out-of-vocab = ignored, duplicates summed) and counts [N, L]."""
    valid = (ids >= 0) & (ids < vocab)
    idx = torch.where(valid, ids, 0)
    zeros = torch.zeros(ids.shape[0], vocab, dtype=torch.float32, device=ids.device)
    seen = zeros.scatter_add(1, idx, valid.to(torch.float32)) > 0
    count = zeros.scatter_add(1, idx, torch.where(valid, counts.to(torch.float32), 0.0))
    return seen, count


def apply_penalties(logits: torch.Tensor, seen: torch.Tensor, count: torch.Tensor,
                    rows: SamplingBatch) -> torch.Tensor:
    """Repetition (HF/vLLM: over the set prompt+generated, x>0 -> x/r else x*r), then
    frequency and presence (OpenAI: x - f*count - p*[count>0], generated only)."""
    rep = rows.repetition_penalty[:, None]
    x = torch.where(seen, torch.where(logits > 0, logits / rep, logits * rep), logits)
    x = x - rows.frequency_penalty[:, None] * count
    return x - rows.presence_penalty[:, None] * (count > 0).to(torch.float32)


def apply_bias(logits: torch.Tensor, rows: SamplingBatch) -> torch.Tensor:
    """Add logit_bias values (padding entries add 0.0 to token 0, which changes nothing)."""
    valid = rows.bias_ids >= 0
    idx = torch.where(valid, rows.bias_ids, 0)
    return logits.scatter_add(1, idx, torch.where(valid, rows.bias_values, 0.0))


def top_k_mask(scaled: torch.Tensor, top_k: torch.Tensor, max_k: int) -> torch.Tensor:
    """Keep x > -inf and x >= the k-th largest (boundary ties kept); k = 0 keeps all."""
    kth = scaled.topk(max_k, dim=1).values.gather(1, (top_k.long() - 1).clamp(min=0)[:, None])
    kth = torch.where(top_k[:, None] > 0, kth, NEG_INF)
    return (scaled > NEG_INF) & (scaled >= kth)


def softmax_kept(scaled: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """p = exp(x - max) / sum over kept tokens, 0 elsewhere (float32)."""
    w = kept_weights(torch.where(keep, scaled, NEG_INF))
    return w / w.sum(1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny)


def top_p_mask(probs: torch.Tensor, keep: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Sort p descending, c = first index with inclusive cumsum >= top_p (clamped to the last
    kept token), keep p >= sorted_p[c]; top_p = 1 keeps everything kept."""
    sorted_p = probs.sort(dim=1, descending=True).values
    below = (sorted_p.cumsum(1) < top_p[:, None]).sum(1, keepdim=True)
    last = (keep.sum(1, keepdim=True) - 1).clamp(min=0)
    threshold = sorted_p.gather(1, torch.minimum(below, last))
    threshold = torch.where(top_p[:, None] < 1, threshold, 0.0)
    return keep & (probs >= threshold)


def min_p_mask(scaled: torch.Tensor, keep: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Keep exp(x - x_max) >= min_p (the max is taken over the kept tokens)."""
    peak = row_max(torch.where(keep, scaled, NEG_INF))
    return keep & (torch.exp(scaled - peak) >= min_p[:, None])


def row_max(logits: torch.Tensor) -> torch.Tensor:
    """Row max [N, 1]; 0 for a row with no finite entry (so exp(x - max) stays 0, not NaN)."""
    peak = logits.amax(1, keepdim=True)
    return torch.where(peak > NEG_INF, peak, 0.0)


def kept_weights(filtered: torch.Tensor) -> torch.Tensor:
    """Unnormalised weights w = exp(x - x_max), 0 for removed tokens: [N, V] float32."""
    return torch.exp(filtered - row_max(filtered))


def process(logits: torch.Tensor, rows: SamplingBatch, bitmask: torch.Tensor | None,
            extra_generated: torch.Tensor | None = None) -> Processed:
    """logits: [N, V] (any float dtype, upcast to float32); rows: N expanded rows;
    bitmask: [N, ceil(V/32)] int32 or None; extra_generated: [N, E] int64 ids counted once
    each as generated tokens on top of the history (-1 = none; verify's earlier drafts)."""
    x = logits.to(torch.float32)
    if bitmask is not None:
        x = apply_grammar(x, bitmask, rows.has_grammar)
    if rows.any_penalty:
        ids, counts = rows.hist_ids, rows.hist_counts
        if extra_generated is not None:
            ids = torch.cat([ids, extra_generated], 1)
            counts = torch.cat([counts, torch.ones_like(extra_generated, dtype=counts.dtype)], 1)
        seen, count = history_counts(ids, counts, x.shape[1])
        x = apply_penalties(x, seen, count, rows)
    if rows.any_bias:
        x = apply_bias(x, rows)
    return Processed(scores=x, filtered=filter_scaled(x, rows))


def filter_scaled(scores: torch.Tensor, rows: SamplingBatch) -> torch.Tensor:
    """Temperature (greedy rows use 1: their filtered law only shapes logprobs), then top-k,
    top-p, min-p; removed tokens -> -inf."""
    greedy = rows.temperature == 0
    temp = torch.where(greedy, 1.0, rows.temperature)
    scaled = scores / temp[:, None]
    keep = scaled > NEG_INF
    if rows.max_top_k > 0:
        keep = top_k_mask(scaled, rows.top_k, rows.max_top_k)
    if rows.any_top_p:
        keep = top_p_mask(softmax_kept(scaled, keep), keep, rows.top_p)
    if rows.any_min_p:
        keep = min_p_mask(scaled, keep, rows.min_p)
    return torch.where(keep, scaled, NEG_INF)
