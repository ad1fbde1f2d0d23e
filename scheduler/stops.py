"""Stop conditions and the streamed text of one request.

A chunk of 1..k+1 tokens arrives per step; `check_chunk` walks it token by token and ends the
request at exactly the token that triggers a stop, dropping the rest of the chunk:

- a stop token (stop_token_ids, or EOS unless ignore_eos): kept in the token ids, not in the text;
- a stop string: the request ends at the token that completes it, even when the string is split
  across tokens or chunks; the text excludes the stop string and anything after it (OpenAI);
- max_tokens: the request ends on its max_tokens-th token ("length").

Text is decoded incrementally (vLLM's prefix/read offsets): only the last few ids are decoded
per token, and a decode that ends in U+FFFD (an incomplete UTF-8 sequence) is held back until
more tokens complete it. The streamed text also holds back the longest suffix that is a prefix
of some stop string, so text once streamed is never retracted; it is flushed at the finish.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Detokenize = Callable[[Sequence[int]], str]

STOP = "stop"
LENGTH = "length"
REPLACEMENT_CHAR = "\ufffd"


@dataclass(frozen=True)
class StopCriteria:
    max_tokens: int
    stop_token_ids: frozenset[int]
    stop_strings: tuple[str, ...]


@dataclass
class TextState:
    """Incremental decoder state and the stable text of one request's output.

    ids: context ids (the prompt's tail, so the first token decodes with its leading space)
        followed by the output ids that are part of the text (stop tokens are not).
    text: decoded text, final up to its end (a stop string and what follows is cut off).
    emitted: how much of `text` has been streamed.
    """

    ids: list[int] = field(default_factory=list)
    prefix_offset: int = 0
    read_offset: int = 0
    text: str = ""
    emitted: int = 0

    @classmethod
    def with_context(cls, context_ids: Sequence[int]) -> TextState:
        return cls(ids=list(context_ids), read_offset=len(context_ids))


@dataclass(frozen=True)
class ChunkOutcome:
    token_ids: list[int]  # the chunk up to and including the stopping token
    text: str  # new text that is safe to stream
    reason: str | None  # STOP, LENGTH or None (still running)


def decode_step(state: TextState, detokenize: Detokenize, final: bool = False) -> str:
    """New text from ids past read_offset; "" while it ends in an incomplete character."""
    prefix = detokenize(state.ids[state.prefix_offset : state.read_offset])
    full = detokenize(state.ids[state.prefix_offset :])
    if len(full) <= len(prefix) or (full.endswith(REPLACEMENT_CHAR) and not final):
        return ""
    state.prefix_offset, state.read_offset = state.read_offset, len(state.ids)
    return full[len(prefix) :]


def find_stop(text: str, start: int, stops: Sequence[str]) -> int | None:
    """Index of the earliest stop string that ends at or after `start` (text before had none)."""
    hits = [text.find(s, max(0, start - len(s) + 1)) for s in stops]
    return min((i for i in hits if i >= 0), default=None)


def held_back(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    return max((_overlap(text, s) for s in stops), default=0)


def _overlap(text: str, stop: str) -> int:
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if stop.startswith(text[-n:]):
            return n
    return 0


def check_chunk(
    state: TextState,
    criteria: StopCriteria,
    num_generated: int,
    token_ids: Sequence[int],
    detokenize: Detokenize,
) -> ChunkOutcome:
    """Apply the stop conditions to a chunk; `num_generated` counts tokens before it."""
    kept: list[int] = []
    reason = None
    for token in token_ids:
        kept.append(token)
        reason = _token_stop(state, criteria, token, detokenize)
        if reason is None and num_generated + len(kept) >= criteria.max_tokens:
            reason = LENGTH
        if reason is not None:
            break
    return ChunkOutcome(kept, _stream(state, criteria, reason, detokenize), reason)


def _token_stop(
    state: TextState, criteria: StopCriteria, token: int, detokenize: Detokenize
) -> str | None:
    if token in criteria.stop_token_ids:
        return STOP
    state.ids.append(token)
    start = len(state.text)
    state.text += decode_step(state, detokenize)
    cut = find_stop(state.text, start, criteria.stop_strings)
    if cut is None:
        return None
    state.text = state.text[:cut]
    return STOP


def _stream(
    state: TextState, criteria: StopCriteria, reason: str | None, detokenize: Detokenize
) -> str:
    if reason is None:
        safe = len(state.text) - held_back(state.text, criteria.stop_strings)
    else:
        state.text += decode_step(state, detokenize, final=True)
        safe = len(state.text)
    new_text = state.text[state.emitted : safe]
    state.emitted = safe
    return new_text
