"""What crosses the scheduler/engine boundary each step: the plan out, the result back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.request import Request, RequestStatus


@dataclass(frozen=True)
class Prefill:
    """Admit `request` into `slot`: prefill token_ids (prompt, plus the output so far when the
    request resumes after preemption) in both models and sample one token (no drafts)."""

    request: Request
    slot: int
    token_ids: tuple[int, ...]

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(frozen=True)
class Decode:
    """Decode `request` in `slot` with k draft tokens (0: plain decode). The KV caches hold
    request.num_tokens - 1 positions; the step feeds the last token plus the k drafts."""

    request: Request
    slot: int
    k: int

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(frozen=True)
class RequestEvent:
    """What to stream for one request after a step, or its end."""

    request_id: str
    token_ids: tuple[int, ...]
    text: str
    status: RequestStatus
    finish_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.status.is_final


@dataclass(frozen=True)
class StepPlan:
    """One step. Before running it the engine frees `freed_slots` in both models (aborted,
    failed and preempted requests) and streams `events` (their final events). Prefills run
    with their own lengths; decodes are padded to `decode_bucket` rows."""

    prefills: tuple[Prefill, ...]
    decodes: tuple[Decode, ...]
    decode_bucket: int
    freed_slots: tuple[int, ...] = ()
    preempted: tuple[str, ...] = ()
    events: tuple[RequestEvent, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.prefills and not self.decodes

    @property
    def max_k(self) -> int:
        return max((d.k for d in self.decodes), default=0)


@dataclass(frozen=True)
class RequestResult:
    """The engine's report for one planned request: the emitted tokens (accepted drafts plus
    the target's token: accepted + 1 of them; exactly 1 for a prefill), or an error."""

    token_ids: Sequence[int] = ()
    drafted: int = 0
    accepted: int = 0
    error: str | None = None


@dataclass(frozen=True)
class StepResult:
    """One RequestResult per planned request, keyed by request_id."""

    results: Mapping[str, RequestResult]


@dataclass(frozen=True)
class CommitOutput:
    """Per-request events of the step, and the slots of requests that ended (free them)."""

    events: tuple[RequestEvent, ...]
    freed_slots: tuple[int, ...]
