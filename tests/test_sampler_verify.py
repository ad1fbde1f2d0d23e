"""Speculative verification preserves the target law (chi-square at false alarm 1e-4,
100k draws per case, fixed seeds): first token ~ p for dense/sparse/no/greedy drafts and for
filtered or grammar-restricted p; the first two tokens follow the target's two-step law;
the acceptance rate is sum(min(p, q)); reusing the draft noise for the residual is caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from test_sampler_distribution import pack_bitmask, random_allowed
from test_sampler_helpers import FALSE_ALARM, chi_square_pvalue, processed_law

from sampler import SamplingBatch, SamplingParams, Stream, sample, sample_from_probs
from sampler.torch_backend import verify as verify_ref

V = 64
K = 2
DRAWS = 100_000
CHUNK = 25_000


def rand_logits(seed: int, n: int = V, scale: float = 1.5) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * scale


def draft_law(seed: int) -> torch.Tensor:
    return torch.softmax(rand_logits(seed, scale=1.2), 0)


def run(p_logits: torch.Tensor, q: torch.Tensor, params: SamplingParams, mode: str,
        draws: int = DRAWS, allowed: np.ndarray | None = None, k: int = K,
        residual_stream: Stream = Stream.RESIDUAL, seed: int = 99) -> dict[str, np.ndarray]:
    """Verify `draws` independent chains whose target logits are p_logits at every position and
    whose drafts are drawn from q (DRAFT stream); positions of different draws never overlap."""
    toks, n_acc = [], []
    mask = None if allowed is None else pack_bitmask(allowed).expand(1, k + 1, -1).contiguous()
    base = SamplingBatch.from_requests([params], [[]], [[]], V, seeds=[seed], num_positions=k + 1,
                                       grammar_bitmask=mask)
    for start in range(0, draws, CHUNK):
        n = min(CHUNK, draws - start)
        pos0 = torch.arange(start, start + n) * (k + 1)
        seeds = torch.full((n,), seed)
        if mode == "greedy":
            drafts = torch.full((n, k), int(q.argmax()))
        else:
            drafts = torch.stack([sample_from_probs(q.expand(n, V), seeds, pos0 + j)
                                  for j in range(k)], 1)
        probs: object = None
        if mode == "dense":
            probs = q.expand(n, k, V)
        elif mode == "sparse":
            ids = torch.nonzero(q > 0).flatten()
            probs = (ids.expand(n, k, -1), q[ids].expand(n, k, -1))
        batch = base.select(torch.zeros(n, dtype=torch.int64), positions=pos0)
        out = verify_ref(p_logits.expand(n, k + 1, V), drafts, batch, probs,  # type: ignore[arg-type]
                         residual_stream=residual_stream)
        toks.append(out.tokens.numpy())
        n_acc.append(out.num_accepted.numpy())
    return {"tokens": np.concatenate(toks), "accepted": np.concatenate(n_acc)}


def sparse_q(seed: int, support: int = 12) -> torch.Tensor:
    q = draft_law(seed)
    keep = torch.zeros(V, dtype=torch.bool)
    keep[torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:support]] = True
    q = torch.where(keep, q, 0.0)
    return q / q.sum()


CASES = {
    "dense": (SamplingParams(), "dense", None),
    "sparse": (SamplingParams(temperature=0.8), "sparse", None),
    "no_probs": (SamplingParams(), "none", None),
    "greedy_drafts": (SamplingParams(), "greedy", None),
    "top_k": (SamplingParams(top_k=6), "dense", None),
    "top_p": (SamplingParams(top_p=0.7), "dense", None),
    "min_p": (SamplingParams(min_p=0.15), "sparse", None),
    "grammar": (SamplingParams(), "dense", 4),
}


@pytest.mark.parametrize("case", list(CASES))
def test_first_token_law_is_target(case: str) -> None:
    """Property: whatever q is, the first emitted token is distributed as p."""
    params, mode, grammar_seed = CASES[case]
    p_logits = rand_logits(1)
    q = sparse_q(2) if mode == "sparse" else draft_law(2)
    allowed = None if grammar_seed is None else random_allowed(grammar_seed)
    out = run(p_logits, q, params, mode, allowed=allowed)
    law = processed_law(p_logits.numpy(), params, allowed=allowed)
    assert chi_square_pvalue(out["tokens"][:, 0], law) > FALSE_ALARM


def test_greedy_target_row_emits_argmax_chain() -> None:
    """Property: a greedy row accepts exactly while draft == argmax and emits the argmax."""
    p_logits = rand_logits(3)
    top = int(p_logits.argmax())
    out = run(p_logits, draft_law(4), SamplingParams(temperature=0), "dense", draws=2000)
    toks = out["tokens"]
    assert (toks[:, 0] == top).all()
    accepted_all = (out["accepted"] == K)
    assert (toks[accepted_all, K] == top).all()


def test_acceptance_rate_is_sum_min_p_q() -> None:
    """Property: P(first draft accepted) = sum_x min(p(x), q(x)) (binomial z-test, 1e-4)."""
    p_logits, q = rand_logits(5), draft_law(6)
    out = run(p_logits, q, SamplingParams(), "dense", k=1)
    law = processed_law(p_logits.numpy(), SamplingParams())
    alpha = np.minimum(law, q.double().numpy()).sum()
    rate = (out["accepted"] >= 1).mean()
    z = (rate - alpha) / np.sqrt(alpha * (1 - alpha) / DRAWS)
    assert abs(z) < stats.norm.isf(FALSE_ALARM / 2), (rate, alpha)


def test_reusing_draft_noise_for_residual_is_detected() -> None:
    """Property: the chi-square test has the power to catch the known residual-noise bug."""
    p_logits, q = rand_logits(1), draft_law(2)
    out = run(p_logits, q, SamplingParams(), "dense", k=1, residual_stream=Stream.DRAFT)
    law = processed_law(p_logits.numpy(), SamplingParams())
    assert chi_square_pvalue(out["tokens"][:, 0], law) < FALSE_ALARM


TOY_V = 8


def toy_model(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two-step target (a, B[x0]) and draft (q0, Q1[x0]) on an 8-token vocab."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(TOY_V, generator=g), torch.randn(TOY_V, TOY_V, generator=g) * 1.5
    q0 = torch.softmax(torch.randn(TOY_V, generator=g), 0)
    q1 = torch.softmax(torch.randn(TOY_V, TOY_V, generator=g), 1)
    return a, b, q0, q1


def test_first_two_tokens_follow_two_step_target_law() -> None:
    """Property: (t0, t1) ~ p(t0) p(t1 | t0), with a repetition and presence penalty so that
    position 1 must count draft 0 as generated; continues with `sample` when only t0 came."""
    a, b, q0, q1 = toy_model(0)
    params = SamplingParams(repetition_penalty=1.4, presence_penalty=0.7)
    n, seed = DRAWS, 5
    pos0 = torch.arange(n) * 3
    seeds = torch.full((n,), seed)
    d0 = sample_from_probs(q0.expand(n, TOY_V), seeds, pos0)
    d1 = sample_from_probs(q1[d0], seeds, pos0 + 1)
    logits = torch.stack([a.expand(n, TOY_V), b[d0], torch.zeros(n, TOY_V)], 1)
    probs = torch.stack([q0.expand(n, TOY_V), q1[d0]], 1)
    base = SamplingBatch.from_requests([params], [[]], [[]], TOY_V, seeds=[seed], num_positions=3)
    batch = base.select(torch.zeros(n, dtype=torch.int64), positions=pos0)
    out = verify_ref(logits, torch.stack([d0, d1], 1), batch, probs)
    t0, t1 = out.tokens[:, 0], out.tokens[:, 1].clone()
    more = out.num_emitted == 1
    for x in range(TOY_V):  # continue each t0 = x chain with one plain sampling step
        rows = more & (t0 == x)
        step = SamplingBatch.from_requests([params], [[]], [[x]], TOY_V, seeds=[seed])
        step = step.select(torch.zeros(int(rows.sum()), dtype=torch.int64), pos0[rows] + 1)
        t1[rows] = sample(b[t0[rows]], step).tokens
    law0 = processed_law(a.numpy(), params)
    joint = np.concatenate([law0[x] * processed_law(b[x].numpy(), params, output=[x])
                            for x in range(TOY_V)])
    assert chi_square_pvalue((t0 * TOY_V + t1).numpy(), joint) > FALSE_ALARM
