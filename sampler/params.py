"""SamplingParams: one request's sampling settings, validated on construction."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

MAX_LOGIT_BIAS_ENTRIES = 1024
MAX_LOGPROBS = 20


def _fail(name: str, allowed: str, value: object) -> ValueError:
    return ValueError(f"{name} must be {allowed}, got {value!r}")


def _real(name: str, value: object, lo: float, hi: float, allowed: str,
          lo_open: bool = False, hi_open: bool = False) -> float:
    """A finite real (int or float, not bool) in the given interval, returned as float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, allowed, value)
    v = float(value)
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo) or (hi_open and v == hi):
        raise _fail(name, allowed, value)
    return v


def _integer(name: str, value: object, lo: int, hi: int | None, allowed: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, allowed, value)
    if value < lo or (hi is not None and value > hi):
        raise _fail(name, allowed, value)
    return value


def _logit_bias(value: object) -> Mapping[int, float]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise _fail("logit_bias", "a dict of token id -> value in [-100, 100]", value)
    if len(value) > MAX_LOGIT_BIAS_ENTRIES:
        raise _fail("logit_bias", f"at most {MAX_LOGIT_BIAS_ENTRIES} entries", len(value))
    out: dict[int, float] = {}
    for tok, bias in value.items():
        tid = _integer("logit_bias key", tok, 0, None, "a token id (int >= 0)")
        out[tid] = _real(f"logit_bias[{tid}]", bias, -100.0, 100.0, "a number in [-100, 100]")
    return MappingProxyType(out)


def _grammar_text(name: str, value: object, allow_dict: bool) -> str | None:
    if value is None:
        return None
    if allow_dict and isinstance(value, dict):
        try:
            return json.dumps(value, sort_keys=True)
        except (TypeError, ValueError) as err:
            raise _fail(name, "a JSON-serialisable schema", value) from err
    if not isinstance(value, str) or not value:
        kind = "a non-empty string or a dict" if allow_dict else "a non-empty string"
        raise _fail(name, kind, value)
    return value


@dataclass(frozen=True)
class SamplingParams:
    """Per-request settings; every field is checked in __post_init__ (ValueError on misuse).

    Ranges: temperature >= 0 (0 = greedy); top_k 0 (off) or 1..vocab (the upper bound is
    checked when the batch is built); top_p in (0, 1]; min_p in [0, 1); repetition_penalty > 0;
    frequency_penalty and presence_penalty in [-2, 2]; logit_bias: at most 1024 token id ->
    value in [-100, 100] (ids checked against the vocab at batch build); seed: any int (used
    mod 2**64) or None; logprobs 0..20; at most one of json_schema (str or dict), regex, ebnf.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: Mapping[int, float] | None = field(default=None, compare=False)
    seed: int | None = None
    logprobs: int = 0
    json_schema: str | dict[str, Any] | None = None
    regex: str | None = None
    ebnf: str | None = None

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("temperature", _real("temperature", self.temperature, 0.0, math.inf, ">= 0"))
        put("top_k", _integer("top_k", self.top_k, 0, None, "0 (off) or 1..vocab_size"))
        put("top_p", _real("top_p", self.top_p, 0.0, 1.0, "in (0, 1]", lo_open=True))
        put("min_p", _real("min_p", self.min_p, 0.0, 1.0, "in [0, 1)", hi_open=True))
        put("repetition_penalty", _real("repetition_penalty", self.repetition_penalty,
                                        0.0, math.inf, "> 0", lo_open=True))
        for name in ("frequency_penalty", "presence_penalty"):
            put(name, _real(name, getattr(self, name), -2.0, 2.0, "in [-2, 2]"))
        put("logit_bias", _logit_bias(self.logit_bias))
        if self.seed is not None:
            _integer("seed", self.seed, -(1 << 63), (1 << 64) - 1,
                     "None or an int in [-2**63, 2**64)")
        put("logprobs", _integer("logprobs", self.logprobs, 0, MAX_LOGPROBS, "in 0..20"))
        put("json_schema", _grammar_text("json_schema", self.json_schema, allow_dict=True))
        put("regex", _grammar_text("regex", self.regex, allow_dict=False))
        put("ebnf", _grammar_text("ebnf", self.ebnf, allow_dict=False))
        if sum(g is not None for g in (self.json_schema, self.regex, self.ebnf)) > 1:
            raise ValueError("grammar: give at most one of json_schema, regex, ebnf")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_grammar(self) -> bool:
        return self.json_schema is not None or self.regex is not None or self.ebnf is not None
