"""SamplingBatch: per-row settings packed into flat device tensors of fixed capacity.

Every per-row setting is a flat tensor of capacity [max_rows] (float32/int32/int64), so one
object can live across CUDA-graph replays (refill the tensors in place, replay) and a kernel
can read row b's settings by pointer arithmetic. Rows [num_rows, max_rows) are neutral padding.

Token history is sparse: the unique ids of prompt + output, padded with -1 to [max_rows,
max_history], with the count of each id among the *generated* tokens (0 for prompt-only ids)
and the number of valid entries per row; no dense [B, V] count tensor is stored. Logit bias
is (ids, values) padded to [max_rows, max_bias] plus a count. The grammar bitmask is int32
[max_rows, num_positions, ceil(V / 32)] in xgrammar's layout (bit i % 32 of word i // 32 set
= token i allowed) plus a per-row flag. The host-side `any_*` / `max_*` fields only let the
backend skip whole stages no row needs; a row whose feature is off is unaffected by it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sampler.params import SamplingParams
from sampler.rng import random_seed, seed_to_int64

_ROW_FIELDS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty",
               "frequency_penalty", "presence_penalty", "seed", "position", "num_logprobs",
               "hist_ids", "hist_counts", "hist_len", "bias_ids", "bias_values", "bias_len",
               "has_grammar", "row_flags")


@dataclass
class SamplingBatch:
    """Per-row sampling settings as device tensors; build with `from_requests`.

    temperature/top_p/min_p/repetition_penalty/frequency_penalty/presence_penalty: [R] float32;
    top_k, num_logprobs, hist_len, bias_len: [R] int32; seed, position: [R] int64 (seed mod
    2**64 as two's complement; position = absolute position of the next token);
    hist_ids [R, H] int64 (-1 padded), hist_counts [R, H] int32; bias_ids [R, M] int64,
    bias_values [R, M] float32; grammar_bitmask [R, P, ceil(V/32)] int32 or None;
    has_grammar [R] bool; row_flags [R] int32, derived from the others (`_row_flags`).
    """

    num_rows: int
    vocab_size: int
    num_positions: int
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    repetition_penalty: torch.Tensor
    frequency_penalty: torch.Tensor
    presence_penalty: torch.Tensor
    seed: torch.Tensor
    position: torch.Tensor
    num_logprobs: torch.Tensor
    hist_ids: torch.Tensor
    hist_counts: torch.Tensor
    hist_len: torch.Tensor
    bias_ids: torch.Tensor
    bias_values: torch.Tensor
    bias_len: torch.Tensor
    has_grammar: torch.Tensor
    row_flags: torch.Tensor
    grammar_bitmask: torch.Tensor | None
    any_penalty: bool
    any_bias: bool
    max_top_k: int
    any_top_p: bool
    any_min_p: bool
    max_logprobs: int

    @property
    def any_grammar(self) -> bool:
        return self.grammar_bitmask is not None

    @classmethod
    def from_requests(
        cls,
        params: Sequence[SamplingParams],
        prompt_ids: Sequence[Sequence[int]],
        output_ids: Sequence[Sequence[int]],
        vocab_size: int,
        *,
        device: torch.device | str = "cpu",
        max_rows: int | None = None,
        max_history: int | None = None,
        max_bias: int | None = None,
        num_positions: int = 1,
        grammar_bitmask: torch.Tensor | None = None,
        seeds: Sequence[int | None] | None = None,
        positions: Sequence[int] | None = None,
    ) -> SamplingBatch:
        """Pack B requests. num_positions is 1 for `sample`, K+1 for `verify`.

        grammar_bitmask: int32 [B, num_positions, ceil(V/32)] (see sampler.grammar), required
        when a row has a grammar. seeds overrides params' seeds; a row with neither gets
        random_seed() (the engine should assign one at admission so it stays fixed).
        positions overrides len(prompt) + len(output). History ids outside [0, V) are
        ignored (they name no token); logit-bias ids outside it raise ValueError.
        """
        rows = len(params)
        if len(prompt_ids) != rows or len(output_ids) != rows:
            raise ValueError("params, prompt_ids and output_ids must have the same length")
        cap = rows if max_rows is None else max_rows
        if cap < rows:
            raise ValueError(f"max_rows={cap} < number of requests {rows}")
        _check_vocab(params, vocab_size)
        # Only rows with a penalty read their history: the others pay nothing for it.
        hist = [_history(pr, o, vocab_size) if _penalised(p) else []
                for p, pr, o in zip(params, prompt_ids, output_ids)]
        h_cap = max([len(h) for h in hist] + [max_history or 0, 1])
        m_cap = max([len(p.logit_bias or {}) for p in params] + [max_bias or 0, 1])
        t = _PackedRows(cap, h_cap, m_cap)
        for r, p in enumerate(params):
            seed = seeds[r] if seeds is not None and seeds[r] is not None else p.seed
            pos = positions[r] if positions is not None else len(prompt_ids[r]) + len(output_ids[r])
            t.fill(r, p, random_seed() if seed is None else seed, pos, hist[r])
        mask, has_grammar = _grammar_tensors(params, grammar_bitmask, cap, num_positions,
                                             vocab_size)
        cols = t.tensors()
        cols["row_flags"] |= has_grammar.int() << 2  # (a grammar may come from the bitmask)
        batch = cls(
            num_rows=rows, vocab_size=vocab_size, num_positions=num_positions,
            **cols, has_grammar=has_grammar, grammar_bitmask=mask,
            any_penalty=any(_penalised(p) for p in params),
            any_bias=any(p.logit_bias for p in params),
            max_top_k=max([p.top_k for p in params] + [0]),
            any_top_p=any(p.top_p < 1 for p in params),
            any_min_p=any(p.min_p > 0 for p in params),
            max_logprobs=max([p.logprobs for p in params] + [0]),
        )
        return batch.to(device)

    def to(self, device: torch.device | str) -> SamplingBatch:
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **moved)

    def head(self, rows: int) -> SamplingBatch:
        """The first `rows` rows as views (no copy; safe inside a CUDA graph)."""
        if rows > self.temperature.shape[0]:
            raise ValueError(f"{rows} rows exceed the batch capacity {self.temperature.shape[0]}")
        return self.rows(0, rows)

    def rows(self, start: int, stop: int) -> SamplingBatch:
        """Rows [start, stop) as views (no copy; safe inside a CUDA graph). The batch-wide
        flags (`any_penalty`, `max_top_k`, ...) stay the whole batch's, so a slice runs the
        same kernel variants as the batch it came from."""
        if not 0 <= start <= stop <= self.temperature.shape[0]:
            raise ValueError(f"rows [{start}, {stop}) outside the batch capacity "
                             f"{self.temperature.shape[0]}")
        if start == 0 and stop == self.num_rows == self.temperature.shape[0]:
            return self  # (already these views: a backend's call takes head, then its chunks)
        picked = {name: getattr(self, name)[start:stop] for name in _ROW_FIELDS}
        mask = None if self.grammar_bitmask is None else self.grammar_bitmask[start:stop]
        return dataclasses.replace(self, num_rows=stop - start, grammar_bitmask=mask, **picked)

    def select(self, index: torch.Tensor, positions: torch.Tensor | None = None) -> SamplingBatch:
        """A batch whose row i is this batch's row index[i] (positions optionally replaced).

        Used to expand rows (e.g. one row per verify position, or many draws of one row).
        """
        picked = {name: getattr(self, name)[index] for name in _ROW_FIELDS}
        if positions is not None:
            picked["position"] = positions.to(torch.int64)
        mask = None if self.grammar_bitmask is None else self.grammar_bitmask[index]
        return dataclasses.replace(self, num_rows=int(index.numel()), grammar_bitmask=mask,
                                   **picked)


def _check_vocab(params: Sequence[SamplingParams], vocab_size: int) -> None:
    for r, p in enumerate(params):
        if p.top_k > vocab_size:
            raise ValueError(f"row {r}: top_k must be 0 (off) or 1..{vocab_size}, got {p.top_k}")
        for tok in p.logit_bias or {}:
            if tok >= vocab_size:
                raise ValueError(f"row {r}: logit_bias token id {tok} is outside the vocab "
                                 f"[0, {vocab_size})")


def _penalised(p: SamplingParams) -> bool:
    return p.repetition_penalty != 1 or p.frequency_penalty != 0 or p.presence_penalty != 0


def _row_flags(p: SamplingParams) -> int:
    """What a row needs, one int32 for the triton tile kernel (one load instead of eight):
    bit 0 a sampled row with top-k, top-p or min-p (it collects candidates), bit 1 a penalty
    or a bias (its logits are patched); bit 2, a grammar, is set by from_requests."""
    filtered = not p.is_greedy and (p.top_k > 0 or p.top_p < 1 or p.min_p > 0)
    return int(filtered) | int(_penalised(p) or bool(p.logit_bias)) << 1


def _history(prompt: Sequence[int], output: Sequence[int], vocab: int) -> list[tuple[int, int]]:
    """Unique in-vocab ids of prompt + output with their count among the output."""
    generated = Counter(t for t in output if 0 <= t < vocab)
    seen = dict.fromkeys(t for t in prompt if 0 <= t < vocab)
    seen.update(dict.fromkeys(generated))
    return [(t, generated.get(t, 0)) for t in seen]


class _PackedRows:
    """Host staging for from_requests: Python lists, turned into tensors once at the end;
    padding rows are neutral (temperature 1, filters off, no history, no bias)."""

    _SCALARS = {"temperature": (torch.float32, 1.0), "top_k": (torch.int32, 0),
                "top_p": (torch.float32, 1.0), "min_p": (torch.float32, 0.0),
                "repetition_penalty": (torch.float32, 1.0),
                "frequency_penalty": (torch.float32, 0.0),
                "presence_penalty": (torch.float32, 0.0), "seed": (torch.int64, 0),
                "position": (torch.int64, 0), "num_logprobs": (torch.int32, 0),
                "hist_len": (torch.int32, 0), "bias_len": (torch.int32, 0),
                "row_flags": (torch.int32, 0)}

    def __init__(self, cap: int, h_cap: int, m_cap: int) -> None:
        self.cap, self.h_cap, self.m_cap = cap, h_cap, m_cap
        self.cols: dict[str, list[float | int]] = {name: [] for name in self._SCALARS}
        self.hist: list[list[tuple[int, int]]] = []
        self.bias: list[list[tuple[int, float]]] = []

    def fill(self, r: int, p: SamplingParams, seed: int, pos: int,
             hist: list[tuple[int, int]]) -> None:
        c = self.cols
        for name in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                     "frequency_penalty", "presence_penalty"):
            c[name].append(getattr(p, name))
        c["seed"].append(seed_to_int64(seed))
        c["position"].append(pos)
        c["num_logprobs"].append(p.logprobs)
        bias = list((p.logit_bias or {}).items())
        c["hist_len"].append(len(hist))
        c["bias_len"].append(len(bias))
        c["row_flags"].append(_row_flags(p))
        self.hist.append(hist)
        self.bias.append(bias)

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for name, (dtype, pad) in self._SCALARS.items():
            col = self.cols[name] + [pad] * (self.cap - len(self.cols[name]))
            out[name] = torch.tensor(col, dtype=dtype)
        out["hist_ids"], out["hist_counts"] = _pad_pairs(self.hist, self.cap, self.h_cap,
                                                         torch.int32)
        out["bias_ids"], out["bias_values"] = _pad_pairs(self.bias, self.cap, self.m_cap,
                                                         torch.float32)
        out["bias_values"] = out["bias_values"].masked_fill(out["bias_ids"] < 0, 0.0)
        out["hist_counts"] = out["hist_counts"].masked_fill(out["hist_ids"] < 0, 0)
        return out


def _pad_pairs(rows: list[list[tuple[int, Any]]], cap: int, width: int,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """[(id, value), ...] per row -> ids [cap, width] int64 (-1 padded), values [cap, width]."""
    ids = [[t for t, _ in row] + [-1] * (width - len(row)) for row in rows]
    vals = [[v for _, v in row] + [0] * (width - len(row)) for row in rows]
    ids += [[-1] * width] * (cap - len(rows))
    vals += [[0] * width] * (cap - len(rows))
    return (torch.tensor(ids, dtype=torch.int64).view(cap, width),
            torch.tensor(vals, dtype=dtype).view(cap, width))


def _grammar_tensors(params: Sequence[SamplingParams], bitmask: torch.Tensor | None, cap: int,
                     positions: int, vocab: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The capacity-sized bitmask (None when no row constrains) and the per-row flag."""
    rows = len(params)
    has = torch.zeros(cap, dtype=torch.bool)
    has[:rows] = torch.tensor([p.has_grammar for p in params], dtype=torch.bool)
    if bitmask is None:
        if bool(has.any()):
            raise ValueError("rows with a grammar need grammar_bitmask (see sampler.grammar)")
        return None, has
    words = (vocab + 31) // 32
    if bitmask.dtype != torch.int32 or tuple(bitmask.shape) != (rows, positions, words):
        raise ValueError(f"grammar_bitmask must be int32 [{rows}, {positions}, {words}], got "
                         f"{bitmask.dtype} {tuple(bitmask.shape)}")
    full = torch.full((cap, positions, words), -1, dtype=torch.int32)
    full[:rows] = bitmask.cpu()
    has[:rows] |= (full[:rows] != -1).flatten(1).any(1)
    return full, has
