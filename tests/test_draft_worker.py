"""The draft worker's KV-cache bookkeeping: proposals from a warm cache (drafted tokens
partly accepted, then new target tokens) equal proposals recomputed from scratch."""

from __future__ import annotations

import random

import torch

from deploy.workers import DraftWorker
from models.drafts import ModelDraft, make_draft
from models.runner import ModelRunner
from models.transformer import from_hf
from scheduler.engine import ProposeItem
from tests.test_engine import tiny_loaded


def _worker(loaded) -> DraftWorker:
    draft = make_draft("self:1", loaded, from_hf(loaded.model))
    assert isinstance(draft, ModelDraft)
    return DraftWorker(draft, ModelRunner(draft.model, 3, 128))


def test_warm_cache_proposals_equal_cold_recompute() -> None:
    """Property: over 12 steps for 3 slots with random acceptance and random corrections,
    every proposal equals that of a fresh worker fed the whole committed sequence."""
    torch.manual_seed(0)
    loaded = tiny_loaded(3)
    warm = _worker(loaded)
    rng = random.Random(1)
    seqs = {s: [rng.randrange(97) for _ in range(rng.randrange(2, 9))] for s in range(3)}
    new = {s: list(seq) for s, seq in seqs.items()}
    for _ in range(12):
        ks = {s: rng.randrange(0, 5) for s in seqs}
        got = warm.propose([ProposeItem(s, tuple(new[s]), ks[s]) for s in seqs])
        cold = _worker(loaded).propose([ProposeItem(s, tuple(seqs[s]), ks[s]) for s in seqs])
        assert got == cold
        for s, proposal in zip(seqs, got):
            accepted = list(proposal[:rng.randrange(0, len(proposal) + 1)])
            new[s] = accepted + [rng.randrange(97)]  # the target's correction or bonus
            seqs[s] += new[s]
