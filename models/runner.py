"""ModelRunner: a KV cache for ``max_slots`` sequences and the steps that use it.

The runner owns one static cache (``[max_slots + 1, kv_heads, max_seq_len, head_dim]`` per
layer; the extra slot is scratch for the rows that pad a batch up to its bucket size) and
each slot's length on the host. The host knows every length because it chose every step,
so a step never reads anything back from the device except the logits it returns.

    prefill(slots, prompts)          -> last-position logits [B, V]
    forward(slots, tokens [B, T])    -> logits [B, T, V]     T = 1 (decode) or k + 1 (verify)
    rollback(slots, lengths)         discard rejected tokens (lengths only go down)
    free(slot)

Batches are padded to bucket sizes (1, 2, 4, 8, ...) so a CUDA graph per (bucket, T) can
serve every batch (see ``models/cuda_graph.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from models.transformer import CausalLM

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def bucket_size(n: int, max_size: int) -> int:
    """Smallest bucket >= n (n itself above the largest bucket)."""
    for b in BUCKETS:
        if b >= n:
            return min(b, max(max_size, n))
    return n


class ModelRunner:
    def __init__(self, model: CausalLM, max_slots: int, max_seq_len: int,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        if max_slots < 1 or max_seq_len < 2:
            raise ValueError(f"need max_slots >= 1 and max_seq_len >= 2, got {max_slots}, "
                             f"{max_seq_len}")
        self.model = model
        param = next(model.parameters())
        self.device = torch.device(device) if device is not None else param.device
        self.dtype = dtype or param.dtype
        self.max_slots, self.max_seq_len = max_slots, max_seq_len
        self.scratch = max_slots
        cfg = model.cfg
        shape = (max_slots + 1, cfg.num_kv_heads, max_seq_len, cfg.head_dim)
        self.caches = [(torch.zeros(shape, device=self.device, dtype=self.dtype),
                        torch.zeros(shape, device=self.device, dtype=self.dtype))
                       for _ in range(cfg.num_layers)]
        self.lengths = [0] * max_slots
        self.active = [False] * max_slots
        self.graphs: Any = None  # a models.cuda_graph.GraphRunner once one is attached

    @property
    def vocab_size(self) -> int:
        return self.model.cfg.vocab_size

    # -- validation -------------------------------------------------------------------
    def _check_slots(self, slots: Sequence[int]) -> list[int]:
        slots = [int(s) for s in slots]
        if len(slots) > self.max_slots:
            raise ValueError(f"{len(slots)} sequences exceed the runner's {self.max_slots} slots")
        if len(set(slots)) != len(slots):
            raise ValueError(f"duplicate slots in one batch: {slots}")
        bad = [s for s in slots if not 0 <= s < self.max_slots]
        if bad:
            raise ValueError(f"slot ids {bad} out of range 0..{self.max_slots - 1}")
        return slots

    def _check_room(self, slots: list[int], extra: Sequence[int]) -> None:
        for s, n in zip(slots, extra):
            if self.lengths[s] + n > self.max_seq_len:
                raise ValueError(f"slot {s}: {self.lengths[s]} cached + {n} new tokens exceed "
                                 f"max_seq_len={self.max_seq_len}")

    # -- steps ------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, slots: Sequence[int], prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Start (or restart) each slot with its prompt; returns last-position logits [B, V].

        Prompts of different lengths are right-padded into one forward; a row's padding is
        written past its length and never read.
        """
        slots = self._check_slots(slots)
        if len(prompts) != len(slots):
            raise ValueError(f"{len(slots)} slots but {len(prompts)} prompts")
        lens = [len(p) for p in prompts]
        if min(lens, default=1) < 1:
            raise ValueError("empty prompt")
        self._check_vocab(prompts)
        for n in lens:
            if n > self.max_seq_len:
                raise ValueError(f"prompt of {n} tokens exceeds max_seq_len={self.max_seq_len}")
        width = max(lens)
        padded = [list(p) + [0] * (width - len(p)) for p in prompts]
        tokens = torch.tensor(padded, dtype=torch.long)
        positions = [0] * len(slots)
        logits = self._run(slots, tokens, positions, pad_room=True)
        for s, n in zip(slots, lens):
            self.lengths[s], self.active[s] = n, True
        last = torch.tensor([n - 1 for n in lens], device=logits.device)
        return logits[torch.arange(len(slots), device=logits.device), last]

    @torch.inference_mode()
    def forward(self, slots: Sequence[int], tokens: torch.Tensor | Sequence[Sequence[int]],
                ) -> torch.Tensor:
        """Append ``tokens [B, T]`` to each slot; returns logits ``[B, T, V]``."""
        slots = self._check_slots(slots)
        tokens = torch.as_tensor(tokens, dtype=torch.long)
        if tokens.dim() != 2 or tokens.shape[0] != len(slots):
            raise ValueError(f"tokens must be [B={len(slots)}, T], got {tuple(tokens.shape)}")
        inactive = [s for s in slots if not self.active[s]]
        if inactive:
            raise ValueError(f"slots {inactive} hold no sequence: prefill them first")
        self._check_vocab(tokens.tolist() if tokens.device.type == "cpu" else [])
        t = tokens.shape[1]
        self._check_room(slots, [t] * len(slots))
        logits = self._run(slots, tokens, [self.lengths[s] for s in slots])
        for s in slots:
            self.lengths[s] += t
        return logits

    def rollback(self, slots: Sequence[int], lengths: Sequence[int]) -> None:
        """Truncate each slot to ``lengths`` tokens (rejected drafts are forgotten)."""
        slots = self._check_slots(slots)
        for s, n in zip(slots, lengths, strict=True):
            if not 0 <= n <= self.lengths[s]:
                raise ValueError(f"slot {s}: cannot roll back to {n} (holds {self.lengths[s]})")
        for s, n in zip(slots, lengths):
            self.lengths[s] = int(n)

    def free(self, slot: int) -> None:
        (slot,) = self._check_slots([slot])
        self.lengths[slot], self.active[slot] = 0, False

    def length(self, slot: int) -> int:
        return self.lengths[slot]

    # -- internals --------------------------------------------------------------------
    def _check_vocab(self, rows) -> None:
        v = self.vocab_size
        for row in rows:
            bad = [x for x in row if not 0 <= x < v]
            if bad:
                raise ValueError(f"token ids {bad[:5]} outside the vocabulary 0..{v - 1}")

    def _run(self, slots: list[int], tokens: torch.Tensor, positions: list[int],
             pad_room: bool = False) -> torch.Tensor:
        b, t = tokens.shape
        size = bucket_size(b, self.max_slots)
        pad = size - b
        slot_t = torch.tensor(slots + [self.scratch] * pad, dtype=torch.long)
        pos_t = torch.tensor(positions + [0] * pad, dtype=torch.long)
        if pad:
            tokens = torch.cat([tokens, tokens.new_zeros(pad, t)])
        logits = None
        if self.graphs is not None and not pad_room:
            logits = self.graphs.replay(tokens, slot_t, pos_t)  # None: no graph for this shape
        if logits is None:
            logits = self.model(tokens.to(self.device, non_blocking=True),
                                slot_t.to(self.device, non_blocking=True),
                                pos_t.to(self.device, non_blocking=True), self.caches)
        return logits[:b]
