"""The PyTorch backend: the executable specification of `sample` and `verify`.

Vectorised over rows and positions; no per-row Python loop and no host sync beyond what the
batch's host-side flags decide. Reads logits once per stage (far from the memory floor; the
Triton backend of the next issue fuses the stages).
"""

from __future__ import annotations

import torch

from sampler.batch import SamplingBatch
from sampler.outputs import SampleOutput, VerifyOutput
from sampler.processing import Processed, kept_weights, process
from sampler.rng import Stream, uniform
from sampler.sampling import inverse_cdf, log_probs, top_logprobs

DraftProbs = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None


def sample(logits: torch.Tensor, batch: SamplingBatch) -> SampleOutput:
    """logits: [B, V] float32/bf16/fp16 (not changed) -> one token per row.

    Greedy rows: argmax of the processed scores (ties to the lowest id); others: inverse CDF
    in token-id order of exp(filtered - max) with uniform(seed, position, SAMPLE).
    """
    rows, proc = process_rows(logits, batch)
    u = uniform(rows.seed, rows.position, Stream.SAMPLE)
    drawn = inverse_cdf(kept_weights(proc.filtered), u)
    tokens = torch.where(rows.temperature == 0, proc.scores.argmax(1), drawn)
    if rows.max_logprobs == 0:
        return SampleOutput(tokens=tokens)
    lp = top_logprobs(log_probs(proc.filtered), tokens, rows.num_logprobs, rows.max_logprobs)
    return SampleOutput(tokens, *lp)


def verify(logits: torch.Tensor, draft_tokens: torch.Tensor, batch: SamplingBatch,
           draft_probs: DraftProbs = None, num_draft: torch.Tensor | None = None,
           residual_stream: Stream = Stream.RESIDUAL) -> VerifyOutput:
    """Speculative verification by rejection sampling (Leviathan et al. 2023, Chen et al. 2023).

    logits: [B, K+1, V]; draft_tokens: [B, K] int64; draft_probs: None (deterministic
    drafts), dense [B, K, V], or sparse (ids [B, K, M] int64, probs [B, K, M]); num_draft: [B]
    (default K). residual_stream exists only so a test can show that reusing the draft's noise
    (Stream.DRAFT) for the residual draw is biased; production passes nothing.
    """
    bsz, k1, vocab = logits.shape
    k = k1 - 1
    dev = logits.device
    drafts = draft_tokens.to(torch.int64)
    n_draft = (torch.full((bsz,), k, device=dev) if num_draft is None else num_draft).to(dev).long()
    _, proc = process_rows(logits, batch, drafts, n_draft)
    filtered = proc.filtered.view(bsz, k1, vocab)
    weights = kept_weights(proc.filtered).view(bsz, k1, vocab)
    total = weights.sum(-1).clamp(min=torch.finfo(torch.float32).tiny)
    argmax = proc.scores.argmax(1).view(bsz, k1)
    head = batch.head(bsz)
    greedy = head.temperature == 0
    accepted = _accept(weights, total, argmax, drafts, draft_probs, n_draft, head, greedy)
    n_acc = accepted.to(torch.int64).cumprod(1).sum(1)
    law, stream = emitted_law(weights, total, drafts, draft_probs, n_acc, n_draft,
                              residual_stream)
    u = uniform(head.seed, head.position + n_acc, stream)
    extra = torch.where(greedy, argmax.gather(1, n_acc[:, None]).squeeze(1), inverse_cdf(law, u))
    tokens = torch.where(torch.arange(k, device=dev) < n_acc[:, None], drafts, -1)
    tokens = torch.cat([tokens, torch.full((bsz, 1), -1, device=dev, dtype=torch.int64)], 1)
    tokens = tokens.scatter(1, n_acc[:, None], extra[:, None])
    out = VerifyOutput(tokens=tokens, num_emitted=n_acc + 1, num_accepted=n_acc)
    if head.max_logprobs > 0:
        num = head.num_logprobs[:, None].expand(bsz, k1)
        lp = top_logprobs(log_probs(filtered), tokens, num, head.max_logprobs)
        out.logprobs, out.top_ids, out.top_logprobs = lp
    return out


def process_rows(logits: torch.Tensor, batch: SamplingBatch, drafts: torch.Tensor | None = None,
                 n_draft: torch.Tensor | None = None) -> tuple[SamplingBatch, Processed]:
    """The spec's processing of every row that draws a token, and those rows: for `sample`
    ([B, V] logits) one a request; for `verify` ([B, K+1, V] logits, drafts [B, K] int64,
    n_draft [B], default K) one a (request, position), rows of [B * (K+1), V]."""
    if drafts is None:
        rows = batch.head(logits.shape[0])
        mask = None if rows.grammar_bitmask is None else rows.grammar_bitmask[:, 0]
        return rows, process(logits, rows, mask)
    bsz, k1, vocab = logits.shape
    if n_draft is None:
        n_draft = torch.full((bsz,), k1 - 1, device=drafts.device)
    rows, mask, earlier = _expand_positions(batch, bsz, k1, drafts, n_draft)
    return rows, process(logits.reshape(bsz * k1, vocab), rows, mask, earlier)


def _expand_positions(batch: SamplingBatch, bsz: int, k1: int, drafts: torch.Tensor,
                      n_draft: torch.Tensor,
                      ) -> tuple[SamplingBatch, torch.Tensor | None, torch.Tensor]:
    """One row per (request, position): position pos0 + j, bitmask of position j, and the
    drafts before j (only real ones, j < num_draft) as extra generated tokens."""
    dev = drafts.device
    k = k1 - 1
    index = torch.arange(bsz, device=dev).repeat_interleave(k1)
    j = torch.arange(k1, device=dev).repeat(bsz)
    head = batch.head(bsz)
    rows = head.select(index, positions=head.position[index] + j)
    mask = None
    if head.grammar_bitmask is not None:
        if head.grammar_bitmask.shape[1] < k1:
            raise ValueError(f"batch has bitmasks for {head.grammar_bitmask.shape[1]} positions, "
                             f"verify needs K+1 = {k1} (build it with num_positions={k1})")
        mask = head.grammar_bitmask[:, :k1].reshape(bsz * k1, -1)
    i = torch.arange(k, device=dev)
    before = (i[None, :] < j[:, None]) & (i[None, :] < n_draft[index][:, None])
    return rows, mask, torch.where(before, drafts[index], -1)


def _accept(weights: torch.Tensor, total: torch.Tensor, argmax: torch.Tensor,
            drafts: torch.Tensor, draft_probs: DraftProbs, n_draft: torch.Tensor,
            head: SamplingBatch, greedy: torch.Tensor) -> torch.Tensor:
    """[B, K] bool: draft j accepted on its own (the chain is cut at the first False).

    Stochastic: accept iff u * q(x) < p(x), u = uniform(seed, pos0 + j, ACCEPT); this is
    probability min(1, p/q), accepts when q(x) = 0 < p(x) and rejects when p(x) = 0 (never
    a NaN). Greedy: accept iff x equals the argmax. Out-of-vocab x: p(x) = 0, rejected.
    """
    bsz, k = drafts.shape
    vocab = weights.shape[-1]
    inside = (drafts >= 0) & (drafts < vocab)
    safe = drafts.clamp(0, vocab - 1)
    p_x = weights[:, :k].gather(2, safe[..., None]).squeeze(2) / total[:, :k]
    p_x = torch.where(inside, p_x, 0.0)
    q_x = _draft_prob_of(drafts, draft_probs)
    j = torch.arange(k, device=drafts.device)
    u = uniform(head.seed[:, None], head.position[:, None] + j, Stream.ACCEPT)
    ok = torch.where(greedy[:, None], inside & (drafts == argmax[:, :k]), u * q_x < p_x)
    return ok & (j < n_draft[:, None])


def _draft_prob_of(drafts: torch.Tensor, draft_probs: DraftProbs) -> torch.Tensor:
    """q_j(x_j): [B, K] float32 (1 for deterministic drafts)."""
    if draft_probs is None:
        return torch.ones(drafts.shape, dtype=torch.float32, device=drafts.device)
    if isinstance(draft_probs, tuple):
        ids, probs = draft_probs
        hit = ids.to(drafts.device) == drafts[..., None]
        return torch.where(hit, probs.to(torch.float32), 0.0).sum(-1)
    safe = drafts.clamp(0, draft_probs.shape[-1] - 1)
    q = draft_probs.to(torch.float32).gather(2, safe[..., None]).squeeze(2)
    return torch.where((drafts >= 0) & (drafts < draft_probs.shape[-1]), q, 0.0)


def emitted_law(weights: torch.Tensor, total: torch.Tensor, drafts: torch.Tensor,
                draft_probs: DraftProbs, n_acc: torch.Tensor, n_draft: torch.Tensor,
                residual_stream: Stream = Stream.RESIDUAL) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights [B, V] that a stochastic row's emitted token (at position n_acc) is drawn
    from, and its stream [B]: after a rejection the residual max(p - q, 0) (p itself when
    that is all zero) on residual_stream, after all drafts the bonus token's p on SAMPLE.
    weights: [B, K+1, V] kept weights; total: [B, K+1] their sums."""
    bsz, _, vocab = weights.shape
    w_e = weights.gather(1, n_acc[:, None, None].expand(bsz, 1, vocab)).squeeze(1)
    rejected = n_acc < n_draft
    resid = _residual(w_e, total.gather(1, n_acc[:, None]), drafts, draft_probs, n_acc)
    law = torch.where((resid.sum(1, keepdim=True) > 0) & rejected[:, None], resid, w_e)
    return law, torch.where(rejected, int(residual_stream), int(Stream.SAMPLE))


def _residual(w_e: torch.Tensor, total_e: torch.Tensor, drafts: torch.Tensor,
              draft_probs: DraftProbs, n_acc: torch.Tensor) -> torch.Tensor:
    """max(p_e - q_e, 0) at the emitted position e = n_acc: [B, V] float32 (garbage for
    rows that accepted everything; the caller replaces it)."""
    bsz, vocab = w_e.shape
    k = drafts.shape[1]
    if k == 0:
        return torch.zeros_like(w_e)
    e = n_acc.clamp(max=k - 1)
    x = drafts.gather(1, e[:, None])
    if draft_probs is None:
        q = torch.zeros_like(w_e)
        inside = (x >= 0) & (x < vocab)
        q = q.scatter(1, x.clamp(0, vocab - 1), inside.to(torch.float32))
    elif isinstance(draft_probs, tuple):
        ids, probs = draft_probs
        m = ids.shape[-1]
        ids_e = ids.to(w_e.device).gather(1, e[:, None, None].expand(bsz, 1, m)).squeeze(1)
        probs_e = probs.to(torch.float32).gather(1, e[:, None, None].expand(bsz, 1, m)).squeeze(1)
        ok = (ids_e >= 0) & (ids_e < vocab)
        q = torch.zeros_like(w_e).scatter_add(1, ids_e.clamp(0, vocab - 1),
                                              torch.where(ok, probs_e, 0.0))
    else:
        q = draft_probs.to(torch.float32).gather(
            1, e[:, None, None].expand(bsz, 1, vocab)).squeeze(1)
    return (w_e / total_e - q).clamp(min=0)
