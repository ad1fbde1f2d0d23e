"""A generation request: what the client asked for, and what the scheduler recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from scheduler.policy import AcceptanceEstimate
from scheduler.stops import StopCriteria, TextState

# Prompt ids decoded ahead of the output, so the first output token keeps its leading space.
DETOKENIZE_CONTEXT = 4


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        return self not in (RequestStatus.WAITING, RequestStatus.RUNNING)


@dataclass
class SpecStats:
    """Per-request speculation record: one entry per decode step (prefill steps draft nothing).

    position_proposed[j] / position_accepted[j]: how often draft position j (0-based) was
    proposed / accepted; accepted drafts are always a prefix of the proposed ones.
    """

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    position_proposed: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)

    def record(self, drafted: int, accepted: int) -> None:
        self.drafted.append(drafted)
        self.accepted.append(accepted)
        grow = drafted - len(self.position_proposed)
        self.position_proposed.extend([0] * grow)
        self.position_accepted.extend([0] * grow)
        for j in range(drafted):
            self.position_proposed[j] += 1
            self.position_accepted[j] += j < accepted

    @property
    def total_drafted(self) -> int:
        return sum(self.drafted)

    @property
    def total_accepted(self) -> int:
        return sum(self.accepted)

    @property
    def acceptance_rate(self) -> float:
        return self.total_accepted / self.total_drafted if self.total_drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Mean tokens emitted per decode step (accepted drafts + 1)."""
        return self.total_accepted / len(self.drafted) + 1 if self.drafted else 0.0


@dataclass(eq=False)
class Request:
    """One request. The fields up to num_speculative_tokens are the client's; the scheduler
    owns the rest. `sampling` is opaque here: the engine hands it to the sampler.

    priority: lower runs sooner; FIFO (arrival order) within a priority.
    num_speculative_tokens: this request's cap on k_i (None: the engine's k_max).
    """

    request_id: str
    prompt_ids: list[int]
    sampling: Any = None
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    eos_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    priority: int = 0
    num_speculative_tokens: int | None = None

    status: RequestStatus = field(default=RequestStatus.WAITING, init=False)
    finish_reason: str | None = field(default=None, init=False)
    output_ids: list[int] = field(default_factory=list, init=False)
    text: TextState = field(init=False)
    stats: SpecStats = field(default_factory=SpecStats, init=False)
    acceptance: AcceptanceEstimate = field(default_factory=AcceptanceEstimate, init=False)
    num_preemptions: int = field(default=0, init=False)
    arrival: int = field(default=-1, init=False)
    admission: int = field(default=-1, init=False)
    slot: int | None = field(default=None, init=False)
    kv_tokens: int = field(default=0, init=False)
    criteria: StopCriteria = field(init=False)

    def __post_init__(self) -> None:
        self.prompt_ids = list(self.prompt_ids)
        self.stop = tuple(self.stop)
        if self.max_tokens < 1:
            raise ValueError(f"{self.request_id}: max_tokens must be >= 1")
        if any(not s for s in self.stop):
            raise ValueError(f"{self.request_id}: stop strings must not be empty")
        if self.num_speculative_tokens is not None and self.num_speculative_tokens < 0:
            raise ValueError(f"{self.request_id}: num_speculative_tokens must be >= 0")
        self.text = TextState.with_context(self.prompt_ids[-DETOKENIZE_CONTEXT:])
        eos = () if self.ignore_eos else self.eos_token_ids
        stop_ids = frozenset((*self.stop_token_ids, *eos))
        self.criteria = StopCriteria(self.max_tokens, stop_ids, self.stop)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def output_text(self) -> str:
        """The text so far (final once finished: stop string excluded)."""
        return self.text.text

    @property
    def tokens_left(self) -> int:
        return self.max_tokens - len(self.output_ids)
