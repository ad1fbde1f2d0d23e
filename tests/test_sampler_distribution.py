"""Sampling matches the analytic processed law (chi-square, false alarm 1e-4 per test, fixed
seeds, 100k draws per row, vocab 64); masked tokens are never drawn; greedy is argmax."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_sampler_helpers import FALSE_ALARM, chi_square_pvalue, processed_law

from sampler import SamplingBatch, SamplingParams, sample

V = 64
DRAWS = 100_000
PROMPT = [1, 2, 3, 5, 8]
OUTPUT = [8, 8, 13, 21, 2]


def make_logits(seed: int, ties: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(V, generator=g) * 2.0
    return torch.round(x * 2) / 2 if ties else x


def random_allowed(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(V) < 0.5


def pack_bitmask(allowed: np.ndarray) -> torch.Tensor:
    """bool [vocab] -> int32 [1, 1, ceil(vocab / 32)] in xgrammar's layout."""
    vocab = len(allowed)
    bits = np.zeros(((vocab + 31) // 32) * 32, dtype=np.uint64)
    bits[:vocab] = allowed
    words = (bits.reshape(-1, 32) << np.arange(32, dtype=np.uint64)).sum(1)
    return torch.tensor(words.astype(np.uint32).view(np.int32)).view(1, 1, -1)


def draw(logits: torch.Tensor, params: list[SamplingParams], draws: int,
         bitmasks: list[np.ndarray | None] | None = None, seed: int = 1234) -> np.ndarray:
    """[rows, draws] tokens: every row repeated `draws` times at positions 0..draws-1, all
    rows in one batch (so each call mixes every row's settings)."""
    rows = len(params)
    mask = None
    if bitmasks is not None:
        mask = torch.cat([pack_bitmask(a) if a is not None else pack_bitmask(np.ones(V, bool))
                          for a in bitmasks])
    base = SamplingBatch.from_requests(params, [PROMPT] * rows, [OUTPUT] * rows, V,
                                       seeds=[seed + r for r in range(rows)], grammar_bitmask=mask)
    out = np.empty((rows, draws), dtype=np.int64)
    chunk = max(1, 200_000 // rows)
    for start in range(0, draws, chunk):
        n = min(chunk, draws - start)
        index = torch.arange(rows).repeat_interleave(n)
        pos = torch.arange(start, start + n).repeat(rows)
        batch = base.select(index, positions=pos)
        out[:, start:start + n] = sample(logits[index], batch).tokens.view(rows, n).numpy()
    return out


SETTINGS = {
    "temperature": SamplingParams(temperature=0.7),
    "hot": SamplingParams(temperature=1.8),
    "top_k": SamplingParams(top_k=7),
    "top_p": SamplingParams(top_p=0.6),
    "min_p": SamplingParams(min_p=0.05),
    "repetition": SamplingParams(repetition_penalty=1.7),
    "frequency": SamplingParams(frequency_penalty=0.9),
    "presence": SamplingParams(presence_penalty=-1.5),
    "logit_bias": SamplingParams(logit_bias={0: 4.0, 9: -100.0, 63: 2.5}),
    "all": SamplingParams(temperature=0.9, top_k=20, top_p=0.85, min_p=0.02,
                          repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.3,
                          logit_bias={4: 3.0}),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_each_setting_alone_matches_law(name: str) -> None:
    """Property: each setting alone draws exactly its processed law (and never a masked id)."""
    logits = make_logits(7)
    p = SETTINGS[name]
    tokens = draw(logits.view(1, V), [p], DRAWS)[0]
    law = processed_law(logits.numpy(), p, PROMPT, OUTPUT)
    assert chi_square_pvalue(tokens, law) > FALSE_ALARM


def test_grammar_alone_matches_law() -> None:
    """Property: a grammar bitmask restricts the support and leaves the law proportional."""
    logits = make_logits(8)
    allowed = random_allowed(3)
    tokens = draw(logits.view(1, V), [SamplingParams()], DRAWS, bitmasks=[allowed])[0]
    law = processed_law(logits.numpy(), SamplingParams(), PROMPT, OUTPUT, allowed)
    assert chi_square_pvalue(tokens, law) > FALSE_ALARM


def test_heterogeneous_batch_every_row_differs() -> None:
    """Property: rows with different settings (incl. ties at the top-k/top-p boundaries and a
    grammar on some rows) each draw their own law in the same calls."""
    params = [SETTINGS["top_k"], SETTINGS["top_p"], SETTINGS["min_p"], SETTINGS["all"],
              SamplingParams(top_k=3, top_p=0.5), SETTINGS["repetition"],
              SamplingParams(temperature=0.5, min_p=0.2), SamplingParams()]
    logits = torch.stack([make_logits(20 + r, ties=r % 2 == 0) for r in range(len(params))])
    masks = [None, None, random_allowed(5), None, None, None, None, random_allowed(6)]
    tokens = draw(logits, params, DRAWS, bitmasks=masks)
    for r, p in enumerate(params):
        law = processed_law(logits[r].numpy(), p, PROMPT, OUTPUT, masks[r])
        assert chi_square_pvalue(tokens[r], law) > FALSE_ALARM, f"row {r}: {p}"


def test_chi_square_detects_a_wrong_law() -> None:
    """Property: the test has power (a law at temperature 1.1 instead of 1 is rejected)."""
    logits = make_logits(7)
    tokens = draw(logits.view(1, V), [SamplingParams(temperature=1.1)], DRAWS)[0]
    law = processed_law(logits.numpy(), SamplingParams(), PROMPT, OUTPUT)
    assert chi_square_pvalue(tokens, law) < FALSE_ALARM


def test_greedy_is_argmax_lowest_id_on_ties() -> None:
    """Property: temperature 0 emits the argmax of the processed scores, ties to the lowest."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randint(-3, 3, (50, V), generator=g).float()
    params = [SamplingParams(temperature=0, top_k=2, repetition_penalty=1.5, logit_bias={5: 1.0})
              ] * 50
    batch = SamplingBatch.from_requests(params, [PROMPT] * 50, [OUTPUT] * 50, V, seeds=[0] * 50)
    tokens = sample(logits, batch).tokens
    for r in range(50):
        law = processed_law(logits[r].numpy(), params[r], PROMPT, OUTPUT)
        assert tokens[r].item() == int(np.argmax(law))


def test_masked_tokens_never_drawn_under_all_filters() -> None:
    """Property: with grammar + top-k + top-p + min-p, every draw is inside all masks."""
    logits = make_logits(11).view(1, V)
    allowed = random_allowed(9)
    p = SamplingParams(temperature=1.5, top_k=10, top_p=0.7, min_p=0.1)
    tokens = draw(logits, [p], 20_000, bitmasks=[allowed])[0]
    law = processed_law(logits[0].numpy(), p, PROMPT, OUTPUT, allowed)
    assert set(np.unique(tokens)) <= set(np.flatnonzero(law > 0))


def test_logprobs_are_the_processed_law() -> None:
    """Property: returned logprobs equal log of the processed law (greedy: T=1 law)."""
    logits = make_logits(12).view(1, V).repeat(2, 1)
    params = [SamplingParams(top_k=10, min_p=0.01, logprobs=5),
              SamplingParams(temperature=0, top_k=10, logprobs=3)]
    batch = SamplingBatch.from_requests(params, [PROMPT] * 2, [OUTPUT] * 2, V, seeds=[1, 2])
    out = sample(logits, batch)
    assert out.top_ids is not None and out.top_logprobs is not None and out.logprobs is not None
    for r, p in enumerate(params):
        law = processed_law(logits[r].numpy(), SamplingParams(top_k=10, min_p=p.min_p),
                            PROMPT, OUTPUT)
        n = p.logprobs
        want = np.argsort(-law, kind="stable")[:n]
        np.testing.assert_array_equal(out.top_ids[r, :n].numpy(), want)
        np.testing.assert_allclose(out.top_logprobs[r, :n].numpy(), np.log(law[want]), rtol=1e-5)
        assert out.top_ids[r, n:].eq(-1).all()
        tok = out.tokens[r].item()
        np.testing.assert_allclose(out.logprobs[r].item(), np.log(law[tok]), rtol=1e-5)
