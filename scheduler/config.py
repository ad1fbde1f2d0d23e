"""Scheduler configuration: one frozen dataclass, checked once at construction (nano-vllm style)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


def _default_buckets(max_slots: int) -> tuple[int, ...]:
    """Powers of two below `max_slots`, then `max_slots` itself: 1, 2, 4, ..., max_slots."""
    buckets = []
    size = 1
    while size < max_slots:
        buckets.append(size)
        size *= 2
    return (*buckets, max_slots)


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits of the engine the scheduler plans for.

    max_slots: rows of the KV caches (concurrent running requests).
    max_seq_len: positions per row; every request needs prompt + max_tokens <= max_seq_len.
    kv_capacity_tokens: KV positions available across all running requests (0: max_slots *
        max_seq_len). Smaller values model a small cache: running requests get preempted.
    max_tokens_per_step: token budget of one step, the sum over the batch of prefill tokens and
        (k_i + 1) per decode (0: max(max_seq_len, max_slots * (k_max + 1))). It must hold one
        full-length prefill (no chunked prefill) and one token per slot.
    batch_buckets: padded decode batch sizes, for CUDA graphs (empty: 1, 2, 4, ..., max_slots).
    k_max: ceiling on draft tokens per request per step; the runtime k_max may not exceed it
        (the engine sizes its buffers and graphs for it).
    adaptive: choose k_i per request from its observed acceptance (scheduler/policy.py).
    draft_cost_ratio: cost of one draft forward step relative to one target forward step.
    """

    max_slots: int = 8
    max_seq_len: int = 2048
    kv_capacity_tokens: int = 0
    max_tokens_per_step: int = 0
    batch_buckets: tuple[int, ...] = ()
    k_max: int = 4
    adaptive: bool = True
    draft_cost_ratio: float = 0.1

    def __post_init__(self) -> None:
        if self.max_slots < 1 or self.max_seq_len < 1:
            raise ValueError("max_slots and max_seq_len must be >= 1")
        if self.k_max < 0 or self.draft_cost_ratio < 0:
            raise ValueError("k_max and draft_cost_ratio must be >= 0")
        self._set_defaults()
        if self.kv_capacity_tokens < self.max_seq_len:
            raise ValueError(
                f"kv_capacity_tokens={self.kv_capacity_tokens} cannot hold one request of "
                f"max_seq_len={self.max_seq_len}"
            )
        if self.max_tokens_per_step < max(self.max_seq_len, self.max_slots):
            raise ValueError(
                f"max_tokens_per_step={self.max_tokens_per_step} must be >= max_seq_len "
                f"({self.max_seq_len}) and >= max_slots ({self.max_slots})"
            )
        self._check_buckets()

    def _set_defaults(self) -> None:
        if not self.kv_capacity_tokens:
            object.__setattr__(self, "kv_capacity_tokens", self.max_slots * self.max_seq_len)
        if not self.max_tokens_per_step:
            budget = max(self.max_seq_len, self.max_slots * (self.k_max + 1))
            object.__setattr__(self, "max_tokens_per_step", budget)
        if not self.batch_buckets:
            object.__setattr__(self, "batch_buckets", _default_buckets(self.max_slots))

    def _check_buckets(self) -> None:
        buckets = tuple(self.batch_buckets)
        if any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ValueError(f"batch_buckets must be increasing positive sizes, got {buckets}")
        if buckets[-1] < self.max_slots:
            raise ValueError(f"largest batch bucket {buckets[-1]} < max_slots {self.max_slots}")
        object.__setattr__(self, "batch_buckets", buckets)

    def bucket(self, n: int) -> int:
        """Smallest bucket >= n (0 for an empty batch)."""
        if n <= 0:
            return 0
        i = bisect.bisect_left(self.batch_buckets, n)
        if i == len(self.batch_buckets):
            raise ValueError(f"batch of {n} exceeds the largest bucket {self.batch_buckets[-1]}")
        return self.batch_buckets[i]
