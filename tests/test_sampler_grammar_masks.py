"""Per-position grammar bitmasks for verify: each position sees the state after the drafts
before it, a grammar-violating draft freezes the mask, a finished grammar allows only stop
tokens, and the matcher is left unchanged."""

from __future__ import annotations

import torch

from sampler import SamplingParams
from sampler.grammar import GrammarState, bitmask_words, compile_params, fill_verify_bitmasks


def allowed(mask_row: torch.Tensor, tok: int) -> bool:
    return bool((int(mask_row[tok // 32]) >> (tok % 32)) & 1)


def test_verify_bitmasks_follow_drafts_and_stop(embedded):
    tok, vocab = embedded.tokenizer, embedded.vocab_size
    params = SamplingParams(regex="ab")
    state = GrammarState(compile_params(params, tok, vocab), vocab)
    a, b = tok.encode("a")[0], tok.encode("b")[0]
    eos = tok.eos_token_id
    out = torch.zeros(5, bitmask_words(vocab), dtype=torch.int32)
    fill_verify_bitmasks(state, [a, b, eos, a], out)
    assert allowed(out[0], a) and not allowed(out[0], b)
    assert allowed(out[1], b) and not allowed(out[1], a)
    assert allowed(out[2], eos) and not allowed(out[2], a)
    assert allowed(out[3], eos) and not allowed(out[3], a)  # terminated: stop tokens only
    assert torch.equal(out[4], out[3])
    # unchanged matcher: position 0 again
    again = torch.zeros_like(out)
    fill_verify_bitmasks(state, [b], again)  # b violates the grammar at position 0
    assert torch.equal(again[0], out[0]) and torch.equal(again[1], out[0])
    for t in (a, b, eos):
        assert state.accept(t)
    assert state.terminated
    row = torch.zeros(bitmask_words(vocab), dtype=torch.int32)
    state.fill(row)
    assert allowed(row, eos) and int((row != 0).sum()) >= 1 and not allowed(row, a)
