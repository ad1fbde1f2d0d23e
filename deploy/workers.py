"""In-process model workers: the target (runner + sampler + grammars) and the draft.

They implement ``scheduler.engine.TargetModel`` / ``DraftModel`` with plain Python values at
the boundary (token ids in, token ids and acceptance counts out), so the same classes run
in one process (tests, ``make generate``) or inside Ray actors (``deploy/``), where each call
is one hop.

Drafts sample greedily: a draft token is then a deterministic proposal (q one-hot), which
``sampler.verify`` accepts with probability p(x) and otherwise resamples from p with x
removed. That is exact for every request setting and keeps the draft -> target message to
token ids (no [k, V] probability tensors crossing actors).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from models.drafts import Draft, NgramDraft
from models.runner import ModelRunner
from sampler import SamplingBatch, SamplingParams
from sampler.api import Sampler
from sampler.grammar import GrammarState, bitmask_words, compile_params, fill_verify_bitmasks
from scheduler.engine import Emitted, PrefillItem, ProposeItem, TokenLogprobs, VerifyItem

GREEDY = SamplingParams(temperature=0.0)


@dataclass
class _Seq:
    params: SamplingParams
    seed: int
    prompt: list[int]
    output: list[int] = field(default_factory=list)
    grammar: GrammarState | None = None

    @property
    def last(self) -> int:
        return self.output[-1] if self.output else self.prompt[-1]


class TargetWorker:
    """The target model: prefill, verify (T = k+1 forward + ``sampler.verify``), rollback."""

    def __init__(self, runner: ModelRunner, tokenizer: Any = None, backend: str = "auto"):
        self.runner = runner
        self.tokenizer = tokenizer
        self.vocab = runner.vocab_size
        self.sampler = Sampler(backend, runner.device)
        self.seqs: dict[int, _Seq] = {}

    def prefill(self, items: Sequence[PrefillItem]) -> list[Emitted]:
        for it in items:
            params = it.sampling if it.sampling is not None else GREEDY
            toks = list(it.token_ids)
            grammar = None
            if params.has_grammar:
                compiled = compile_params(params, self.tokenizer, self.vocab)
                assert compiled is not None
                grammar = GrammarState(compiled, self.vocab)
                for tok in toks[it.num_prompt:]:  # resuming after preemption
                    grammar.accept(tok)
            self.seqs[it.slot] = _Seq(params, it.seed, toks[:it.num_prompt],
                                      toks[it.num_prompt:], grammar)
        slots = [it.slot for it in items]
        logits = self.runner.prefill(slots, [list(it.token_ids) for it in items])
        return self._emit(slots, logits[:, None, :], [[] for _ in items])

    def verify(self, items: Sequence[VerifyItem]) -> list[Emitted]:
        slots = [it.slot for it in items]
        drafts = [list(it.draft_tokens) for it in items]
        width = max(len(d) for d in drafts) + 1
        feed = [[self.seqs[s].last] + d + [0] * (width - 1 - len(d))
                for s, d in zip(slots, drafts)]
        base = [self.runner.length(s) for s in slots]
        logits = self.runner.forward(slots, feed)
        emitted = self._emit(slots, logits, drafts)
        self.runner.rollback(slots, [b + 1 + e.accepted for b, e in zip(base, emitted)])
        return emitted

    def free(self, slots: Sequence[int]) -> None:
        for s in slots:
            if self.seqs.pop(s, None) is not None:
                self.runner.free(s)

    # -- internals --------------------------------------------------------------------
    def _emit(self, slots: list[int], logits: torch.Tensor,
              drafts: list[list[int]]) -> list[Emitted]:
        """Verify ``drafts`` against ``logits [B, K+1, V]`` and record the emitted tokens."""
        seqs = [self.seqs[s] for s in slots]
        k = logits.shape[1] - 1
        batch = SamplingBatch.from_requests(
            [q.params for q in seqs], [q.prompt for q in seqs], [q.output for q in seqs],
            self.vocab, device=logits.device, num_positions=k + 1,
            grammar_bitmask=self._bitmasks(seqs, drafts, k), seeds=[q.seed for q in seqs])
        dev = logits.device
        draft_t = torch.tensor([d + [0] * (k - len(d)) for d in drafts], dtype=torch.long,
                               device=dev).view(len(slots), k)
        num_draft = torch.tensor([len(d) for d in drafts], dtype=torch.long, device=dev)
        out = self.sampler.verify(logits, draft_t, batch, None, num_draft)
        tokens, n_emit = out.tokens.tolist(), out.num_emitted.tolist()
        n_acc = out.num_accepted.tolist()
        lps = self._logprobs(out, n_emit)
        result = []
        for i, q in enumerate(seqs):
            new = tokens[i][:n_emit[i]]
            q.output.extend(new)
            if q.grammar is not None:
                for tok in new:
                    q.grammar.accept(tok)
            result.append(Emitted(tuple(new), n_acc[i], lps[i]))
        return result

    def _bitmasks(self, seqs: list[_Seq], drafts: list[list[int]], k: int):
        if not any(q.grammar is not None for q in seqs):
            return None
        words = bitmask_words(self.vocab)
        mask = torch.full((len(seqs), k + 1, words), -1, dtype=torch.int32)
        for i, (q, d) in enumerate(zip(seqs, drafts)):
            if q.grammar is not None:
                fill_verify_bitmasks(q.grammar, d, mask[i])
        return mask

    @staticmethod
    def _logprobs(out, n_emit: list[int]) -> list[tuple[TokenLogprobs, ...]]:
        if out.logprobs is None:
            return [()] * len(n_emit)
        lp = out.logprobs.tolist()
        ids = out.top_ids.tolist() if out.top_ids is not None else None
        tops = out.top_logprobs.tolist() if out.top_logprobs is not None else None
        rows = []
        for i, n in enumerate(n_emit):
            row = []
            for j in range(n):
                top = () if ids is None or tops is None else tuple(
                    (t, v) for t, v in zip(ids[i][j], tops[i][j]) if t >= 0)
                row.append(TokenLogprobs(lp[i][j], top))
            rows.append(tuple(row))
        return rows


class DraftWorker:
    """The draft: a model runner drafting greedily, or prompt lookup (``ngram:N``)."""

    def __init__(self, draft: Draft, runner: ModelRunner | None):
        self.draft, self.runner = draft, runner
        self.seqs: dict[int, list[int]] = {}  # slot -> tokens committed
        # slot -> (n, tail): the draft's KV cache holds seqs[slot][:n] + tail (tail = the
        # drafted tokens not yet committed), so a step compares only the tail, never the
        # whole sequence
        self.cached: dict[int, tuple[int, list[int]]] = {}

    def propose(self, items: Sequence[ProposeItem]) -> list[tuple[int, ...]]:
        for it in items:
            self.seqs.setdefault(it.slot, []).extend(it.new_tokens)
        if isinstance(self.draft, NgramDraft):
            return [tuple(self.draft.propose(self.seqs[it.slot], it.k)) for it in items]
        live = [it for it in items if it.k > 0]
        out: dict[int, tuple[int, ...]] = {it.slot: () for it in items}
        if live:
            out.update(self._propose_model(live))
        return [out[it.slot] for it in items]

    def free(self, slots: Sequence[int]) -> None:
        for s in slots:
            self.seqs.pop(s, None)
            if self.cached.pop(s, None) is not None and self.runner is not None:
                self.runner.free(s)

    def _propose_model(self, items: Sequence[ProposeItem]) -> dict[int, tuple[int, ...]]:
        assert self.runner is not None
        slots = [it.slot for it in items]
        logits = self._catch_up(slots)
        k = max(it.k for it in items)
        tokens = [logits.argmax(-1)]
        for _ in range(k - 1):
            step = self.runner.forward(slots, tokens[-1][:, None])
            tokens.append(step[:, -1].argmax(-1))
        drafted = torch.stack(tokens, 1).tolist()
        for s, row in zip(slots, drafted):
            self.cached[s] = (len(self.seqs[s]), row[:k - 1])
        return {it.slot: tuple(row[:it.k]) for it, row in zip(items, drafted)}

    def _catch_up(self, slots: list[int]) -> torch.Tensor:
        """Bring each slot's cache to its committed sequence; logits after its last token."""
        runner = self.runner
        assert runner is not None
        fresh = [s for s in slots if s not in self.cached]
        if fresh:
            runner.prefill(fresh, [self.seqs[s][:-1] or self.seqs[s] for s in fresh])
            for s in fresh:
                self.cached[s] = (max(len(self.seqs[s]) - 1, 1), [])
        pending = []
        for s in slots:
            seq = self.seqs[s]
            n, tail = self.cached[s]
            keep = n + _common_prefix(tail, seq[n:n + len(tail)])
            keep = min(keep, len(seq) - 1)  # always feed at least the last token
            runner.rollback([s], [keep])
            pending.append(seq[keep:])
        width = max(len(p) for p in pending)
        logits = runner.forward(slots, [p + [0] * (width - len(p)) for p in pending])
        runner.rollback(slots, [len(self.seqs[s]) for s in slots])
        for s in slots:
            self.cached[s] = (len(self.seqs[s]), [])
        idx = torch.tensor([len(p) - 1 for p in pending], device=logits.device)
        return logits[torch.arange(len(slots), device=logits.device), idx]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
