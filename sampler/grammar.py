"""Grammar constraints with xgrammar: compile per tokenizer, track a request, fill bitmasks.

Bitmask layout is xgrammar's: int32 [rows, ceil(V / 32)], bit i % 32 of word i // 32 set iff
token i is allowed. Compilation is cached per (tokenizer, vocab size) and per grammar text.
Host-side (CPU) code; the filled bitmasks are copied into the SamplingBatch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
import xgrammar as xgr

from sampler.params import SamplingParams

_LOCK = threading.Lock()
_COMPILERS: dict[tuple[int, int], xgr.GrammarCompiler] = {}


def _bit(i: int) -> int:
    """Bit i of an int32 word, as a signed int32 value."""
    return (1 << i) - (1 << 32) if i == 31 else 1 << i


def bitmask_words(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def compiler_for(tokenizer: Any, vocab_size: int) -> xgr.GrammarCompiler:
    """A GrammarCompiler for this tokenizer and model vocab size (cached; thread-safe)."""
    key = (id(tokenizer), vocab_size)
    with _LOCK:
        if key not in _COMPILERS:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
            _COMPILERS[key] = xgr.GrammarCompiler(info)
        return _COMPILERS[key]


def compile_params(params: SamplingParams, tokenizer: Any, vocab_size: int,
                   ) -> xgr.CompiledGrammar | None:
    """Compile the request's grammar (None when it has none); ValueError if it is invalid.

    JSON schemas are compiled for compact JSON (no free whitespace), so a model cannot pad
    its output with unbounded whitespace.
    """
    compiler = compiler_for(tokenizer, vocab_size)
    try:
        if params.json_schema is not None:
            assert isinstance(params.json_schema, str)  # normalised by SamplingParams
            return compiler.compile_json_schema(params.json_schema, any_whitespace=False)
        if params.regex is not None:
            return compiler.compile_regex(params.regex)
        if params.ebnf is not None:
            return compiler.compile_grammar(params.ebnf)
    except RuntimeError as err:
        raise ValueError(f"grammar does not compile: {err}") from err
    return None


@dataclass
class GrammarState:
    """One request's position in its grammar (wraps xgrammar.GrammarMatcher)."""

    compiled: xgr.CompiledGrammar
    vocab_size: int
    matcher: xgr.GrammarMatcher = field(init=False)

    def __post_init__(self) -> None:
        self.matcher = xgr.GrammarMatcher(self.compiled, max_rollback_tokens=-1)

    def fill(self, out: torch.Tensor) -> None:
        """Write the allowed-next-token mask into out: [ceil(V/32)] int32 (CPU).

        After the grammar has accepted its stop token nothing may follow but stop tokens
        (a request that ignores EOS keeps emitting them).
        """
        if self.matcher.is_terminated():
            out.zero_()
            for tok in self.compiled.tokenizer_info.stop_token_ids:
                if 0 <= tok < self.vocab_size:
                    out[tok // 32] |= _bit(tok % 32)
            return
        self.matcher.fill_next_token_bitmask(out.view(1, -1), 0)

    def accept(self, token: int) -> bool:
        """Advance by one token; False (state unchanged) if the grammar forbids it."""
        return 0 <= token < self.vocab_size and self.matcher.accept_token(token)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self.matcher.rollback(num_tokens)

    @property
    def terminated(self) -> bool:
        return self.matcher.is_terminated()


def fill_verify_bitmasks(state: GrammarState, drafts: list[int], out: torch.Tensor) -> None:
    """Bitmasks for verify positions 0..K: out [K+1, ceil(V/32)] int32 (CPU).

    Position j's mask is the state after drafts[:j]. If draft j is rejected by the grammar,
    positions after j repeat position j's mask (they are never emitted: verify rejects draft
    j because its probability is 0). The state is rolled back: unchanged on return.
    """
    advanced = 0
    state.fill(out[0])
    for tok in drafts[: out.shape[0] - 1]:
        if state.terminated or not state.accept(tok):
            break
        advanced += 1
        state.fill(out[advanced])  # stop tokens only, once the grammar has terminated
    out[advanced + 1 :] = out[advanced]
    state.rollback(advanced)


def all_allowed(rows: int, positions: int, vocab_size: int) -> torch.Tensor:
    """An int32 [rows, positions, ceil(V/32)] bitmask allowing every token."""
    return torch.full((rows, positions, bitmask_words(vocab_size)), -1, dtype=torch.int32)
