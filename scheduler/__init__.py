"""Request scheduling, batching and speculation policy: pure Python (no torch, no models)."""

from scheduler.config import SchedulerConfig
from scheduler.policy import AcceptanceEstimate, SpecSettings, choose_k
from scheduler.request import Request, RequestStatus, SpecStats
from scheduler.scheduler import Scheduler
from scheduler.stats import EngineStats
from scheduler.step import (
    CommitOutput,
    Decode,
    Prefill,
    RequestEvent,
    RequestResult,
    StepPlan,
    StepResult,
)
from scheduler.stops import Detokenize

__all__ = [
    "AcceptanceEstimate",
    "CommitOutput",
    "Decode",
    "Detokenize",
    "EngineStats",
    "Prefill",
    "Request",
    "RequestEvent",
    "RequestResult",
    "RequestStatus",
    "Scheduler",
    "SchedulerConfig",
    "SpecSettings",
    "SpecStats",
    "StepPlan",
    "StepResult",
    "choose_k",
]
