"""Slots and KV accounting (the scheduler's block manager, in tokens rather than blocks).

Each running request owns one slot and `kv_tokens` KV positions. While a step is planned:
length + k_i for a decode (the last token and k drafts are written before rollback), length
for a prefill. After the step: length - 1, what the caches hold after rollback (the token just
sampled is fed next step); this never exceeds the step's reservation, as a step emits at most
k_i + 1 tokens.
Invariant: free slots + running requests = max_slots; kv_used = sum of running kv_tokens.
"""

from __future__ import annotations

import heapq

from scheduler.request import Request


class Resources:
    def __init__(self, max_slots: int, kv_capacity: int) -> None:
        self.kv_capacity = kv_capacity
        self.kv_used = 0
        self._free = list(range(max_slots))

    @property
    def num_free_slots(self) -> int:
        return len(self._free)

    def can_admit(self, kv_tokens: int) -> bool:
        return bool(self._free) and self.kv_used + kv_tokens <= self.kv_capacity

    def admit(self, request: Request, kv_tokens: int) -> int:
        request.slot = heapq.heappop(self._free)
        request.kv_tokens = kv_tokens
        self.kv_used += kv_tokens
        return request.slot

    def resize(self, request: Request, kv_tokens: int) -> None:
        self.kv_used += kv_tokens - request.kv_tokens
        request.kv_tokens = kv_tokens

    def release(self, request: Request) -> int:
        slot = request.slot
        if slot is None:
            raise RuntimeError(f"{request.request_id} holds no slot")
        heapq.heappush(self._free, slot)
        self.kv_used -= request.kv_tokens
        request.slot, request.kv_tokens = None, 0
        return slot
