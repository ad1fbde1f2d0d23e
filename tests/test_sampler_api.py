"""Validation errors, RNG definition, determinism across batch compositions, and isolation of
rows with out-of-vocab ids."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

from sampler import Sampler, SamplingBatch, SamplingParams, Stream, sample, verify
from sampler.rng import hash32, mix32, seed_to_int64, uniform

V = 64

BAD = [
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", "1"), ("top_k", -1), ("top_k", 2.0), ("top_k", True), ("top_p", 0.0),
    ("top_p", 1.5), ("top_p", math.nan), ("min_p", 1.0), ("min_p", -0.1),
    ("repetition_penalty", 0.0), ("repetition_penalty", math.inf),
    ("frequency_penalty", 2.5), ("presence_penalty", -2.1), ("presence_penalty", False),
    ("logit_bias", {1: 101.0}), ("logit_bias", {-1: 1.0}), ("logit_bias", {1: math.nan}),
    ("logit_bias", {i: 0.0 for i in range(1025)}), ("logit_bias", [1, 2]),
    ("seed", 1.5), ("seed", True), ("seed", 1 << 64), ("logprobs", 21), ("logprobs", -1),
    ("json_schema", 5), ("regex", ""), ("ebnf", 3),
]


@pytest.mark.parametrize(("field", "value"), BAD)
def test_bad_values_raise_naming_the_field(field: str, value: object) -> None:
    """Property: every out-of-range, non-finite or wrongly typed value is a ValueError that
    names the field."""
    with pytest.raises(ValueError, match=field.split("_")[0]):
        SamplingParams(**{field: value})  # type: ignore[arg-type]


def test_two_grammars_rejected() -> None:
    with pytest.raises(ValueError, match="at most one"):
        SamplingParams(regex="a+", ebnf='root ::= "a"')


def test_vocab_checks_at_build_name_row_and_id() -> None:
    """Property: logit-bias ids and top_k are checked against the vocab when building."""
    with pytest.raises(ValueError, match=r"row 1: logit_bias token id 64"):
        SamplingBatch.from_requests([SamplingParams(), SamplingParams(logit_bias={64: 1.0})],
                                    [[], []], [[], []], V)
    with pytest.raises(ValueError, match="row 0: top_k"):
        SamplingBatch.from_requests([SamplingParams(top_k=65)], [[]], [[]], V)


def test_row_flags_name_what_each_row_needs() -> None:
    """Property: row_flags (bit 0 a sampled row with a filter, bit 1 a penalty or a bias,
    bit 2 a grammar: what the triton tile kernel reads instead of the eight settings) agrees
    with the settings it is derived from; padding rows are 0."""
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0, top_k=5),
              SamplingParams(top_p=0.9), SamplingParams(min_p=0.1, presence_penalty=0.5),
              SamplingParams(logit_bias={3: 1.0}), SamplingParams(repetition_penalty=1.2),
              SamplingParams(frequency_penalty=0.1, top_k=3)]
    mask = torch.full((len(params), 1, 2), -1, dtype=torch.int32)
    mask[2, 0, 0] = 0  # row 2 constrained by its bitmask
    batch = SamplingBatch.from_requests(params, [[1]] * 7, [[2]] * 7, V, max_rows=9,
                                        grammar_bitmask=mask)
    assert batch.row_flags.dtype == torch.int32
    assert batch.row_flags.tolist() == [0, 0, 5, 3, 2, 2, 3, 0, 0]
    assert batch.head(4).row_flags.tolist() == [0, 0, 5, 3]


def test_mix32_is_lowbias32_and_uniform_in_open_interval() -> None:
    """Property: the hash is the documented integer mixer; uniforms are in (0, 1)."""
    def ref(x: int) -> int:
        x ^= x >> 16
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x846CA68B) & 0xFFFFFFFF
        return x ^ (x >> 16)
    xs = torch.randint(0, 1 << 32, (500,), dtype=torch.int64)
    assert mix32(xs).tolist() == [ref(int(x)) for x in xs]
    seed = (1 << 64) - 3
    h = ref(ref(ref(0x9E3779B1 ^ (seed & 0xFFFFFFFF)) ^ (seed >> 32)) ^ 17)
    assert hash32(torch.tensor([seed_to_int64(seed)]), torch.tensor([17]), Stream.SAMPLE) == h
    u = uniform(torch.zeros(1 << 16, dtype=torch.int64), torch.arange(1 << 16), Stream.ACCEPT)
    assert bool((u > 0).all() and (u < 1).all())


def mixed_params() -> list[SamplingParams]:
    return [SamplingParams(seed=1), SamplingParams(temperature=0, seed=2),
            SamplingParams(top_k=5, top_p=0.9, seed=3, logprobs=2),
            SamplingParams(min_p=0.1, repetition_penalty=1.2, frequency_penalty=0.5, seed=4),
            SamplingParams(logit_bias={3: 10.0}, presence_penalty=1.0, seed=5)]


def build(params, order, k1=1, extra_hist=None):
    hist = [[1, 2, 3, r] for r in range(len(params))]
    if extra_hist is not None:
        hist[extra_hist[0]] = hist[extra_hist[0]] + extra_hist[1]
    return SamplingBatch.from_requests([params[i] for i in order], [hist[i] for i in order],
                                       [[4, 4, i] for i in order], V, num_positions=k1)


def test_seeded_rows_repeat_across_compositions_and_orders() -> None:
    """Property: a seeded row's token and logprobs are bit-identical whatever its neighbours,
    the batch size or the row order, for sample and for verify."""
    params = mixed_params()
    logits = torch.randn(len(params), 3, V, generator=torch.Generator().manual_seed(0))
    drafts = torch.randint(0, V, (len(params), 2), generator=torch.Generator().manual_seed(1))
    full_s = sample(logits[:, 0], build(params, range(5)))
    full_v = verify(logits, drafts, build(params, range(5), 3), num_draft=torch.tensor([2] * 5))
    for order in ([4, 3, 2, 1, 0], [2], [0, 2, 4], [3, 1]):
        idx = torch.tensor(order)
        s = sample(logits[idx, 0], build(params, order))
        assert torch.equal(s.tokens, full_s.tokens[idx])
        v = verify(logits[idx], drafts[idx], build(params, order, 3),
                   num_draft=torch.tensor([2] * len(order)))
        assert torch.equal(v.tokens, full_v.tokens[idx])
        if 2 in order:  # the row that asks for logprobs
            assert v.logprobs is not None and full_v.logprobs is not None
            assert torch.equal(v.logprobs, full_v.logprobs[idx])


def test_verify_without_drafts_equals_sample() -> None:
    """Property: num_draft = 0 rows produce exactly `sample`'s token (bonus = SAMPLE stream)."""
    params = mixed_params()
    logits = torch.randn(5, 3, V, generator=torch.Generator().manual_seed(2))
    v = verify(logits, torch.zeros(5, 2, dtype=torch.int64), build(params, range(5), 3),
               num_draft=torch.zeros(5, dtype=torch.int64))
    s = sample(logits[:, 0], build(params, range(5)))
    assert torch.equal(v.tokens[:, 0], s.tokens) and v.num_emitted.eq(1).all()


def test_out_of_vocab_history_and_drafts_touch_no_other_row() -> None:
    """Property: out-of-vocab history ids or draft ids in row 2 leave all other rows
    byte-identical; the out-of-vocab draft is rejected at its position."""
    params = mixed_params()
    logits = torch.randn(5, 3, V, generator=torch.Generator().manual_seed(3))
    drafts = logits[:, :2].argmax(-1)
    clean = verify(logits, drafts, build(params, range(5), 3))
    bad_drafts = drafts.clone()
    bad_drafts[2, 1] = V + 7
    dirty = verify(logits, bad_drafts, build(params, range(5), 3, extra_hist=(2, [V, 10**9, -5])))
    others = torch.tensor([0, 1, 3, 4])
    assert torch.equal(clean.tokens[others], dirty.tokens[others])
    assert dirty.num_accepted[2] <= 1
    assert 0 <= int(dirty.tokens[2, int(dirty.num_accepted[2])]) < V
    s_clean = sample(logits[:, 0], build(params, range(5)))
    s_dirty = sample(logits[:, 0], build(params, range(5), extra_hist=(2, [V, -1])))
    assert torch.equal(s_clean.tokens[others], s_dirty.tokens[others])


def test_backend_selection() -> None:
    """Property: 'auto' is torch on the CPU; unknown backends are rejected; triton is not
    silently replaced by torch."""
    assert Sampler("auto", "cpu").backend == "torch"
    with pytest.raises(ValueError, match="backend"):
        Sampler("cuda")
    with contextlib.suppress(NotImplementedError):
        assert Sampler("triton").backend == "triton"
