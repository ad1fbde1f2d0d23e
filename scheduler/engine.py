"""The speculative-decoding loop: scheduler plan -> draft proposes -> target verifies -> commit.

Pure Python like the rest of ``scheduler/``: the two models sit behind the small protocols
below (token ids and settings in, token ids and acceptance counts out), which the in-process
workers of ``deploy/workers.py`` implement and which Ray actors wrap unchanged.

One step, for the requests the scheduler planned:

1. free the slots of aborted / preempted requests in both models;
2. target.prefill(new requests) -> one sampled token each (the draft catches up lazily);
3. draft.propose(decoding requests, k_i) -> up to k_i draft tokens each; it is told the
   tokens committed since it last saw the request, and re-syncs its own KV cache;
4. target.verify(decoding requests, drafts) -> accepted drafts + one target token each,
   sampled by ``sampler.verify`` (exact target distribution), KV rolled back past rejects;
5. scheduler.commit -> stop conditions, streamed text, per-request acceptance stats.

Two model calls per step: with Ray actors, two hops (see ``deploy/``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.request import Request
from scheduler.scheduler import Scheduler
from scheduler.step import RequestEvent, RequestResult, StepPlan, StepResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrefillItem:
    """Start ``slot`` with ``token_ids`` (the first ``num_prompt`` are the prompt, the rest
    were generated before a preemption) and sample its next token with ``sampling``."""

    slot: int
    token_ids: tuple[int, ...]
    num_prompt: int
    sampling: Any
    seed: int


@dataclass(frozen=True)
class ProposeItem:
    """Propose ``k`` tokens for ``slot``; ``new_tokens`` are the tokens committed since the
    draft last saw this slot (the whole sequence the first time)."""

    slot: int
    new_tokens: tuple[int, ...]
    k: int


@dataclass(frozen=True)
class VerifyItem:
    slot: int
    draft_tokens: tuple[int, ...]


@dataclass(frozen=True)
class TokenLogprobs:
    """Logprob of an emitted token and the top alternatives (for the API's logprobs)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Emitted:
    token_ids: tuple[int, ...]
    accepted: int = 0
    logprobs: tuple[TokenLogprobs, ...] = ()


class TargetModel(Protocol):
    def prefill(self, items: Sequence[PrefillItem]) -> list[Emitted]: ...
    def verify(self, items: Sequence[VerifyItem]) -> list[Emitted]: ...
    def free(self, slots: Sequence[int]) -> None: ...


class DraftModel(Protocol):
    def propose(self, items: Sequence[ProposeItem]) -> list[tuple[int, ...]]: ...
    def free(self, slots: Sequence[int]) -> None: ...


@dataclass
class Output:
    """Everything streamed for a request so far (kept until the caller pops it)."""

    request: Request
    logprobs: list[TokenLogprobs] = field(default_factory=list)


COST_EMA = 0.2  # weight of the newest step in the measured draft-cost ratio


class Engine:
    """Drives one scheduler, one target and (optionally) one draft in lock-step.

    With ``measure_cost`` the engine times every speculative step and keeps the scheduler's
    ``draft_cost_ratio`` (one draft step over one target step, the adaptive policy's cost
    model) at an exponential average of what it measures, hops included, so the policy fits
    the hardware it runs on rather than a guess.
    """

    def __init__(self, scheduler: Scheduler, target: TargetModel, draft: DraftModel | None,
                 measure_cost: bool = True, clock: Callable[[], float] = time.perf_counter):
        self.scheduler = scheduler
        self.target, self.draft = target, draft
        self.measure_cost, self.clock = measure_cost, clock
        self.cost_ratio: float | None = None
        self.draft_seen: dict[int, int] = {}  # slot -> tokens of its sequence the draft has
        self.outputs: dict[str, Output] = {}
        self.seeds: dict[str, int] = {}

    def add(self, request: Request) -> None:
        self.scheduler.add(request)
        seed = getattr(request.sampling, "seed", None)
        self.seeds[request.request_id] = random.getrandbits(63) if seed is None else seed
        self.outputs[request.request_id] = Output(request)

    def abort(self, request_id: str) -> bool:
        return self.scheduler.abort(request_id)

    def has_work(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestEvent]:
        plan = self.scheduler.schedule()
        self._free(plan.freed_slots)
        results: dict[str, RequestResult] = {}
        try:
            self._prefill(plan, results)
            self._decode(plan, results)
        except Exception as err:  # a model failure fails the step's requests, not the engine
            log.exception("engine step failed; failing its %d requests",
                          len(plan.prefills) + len(plan.decodes))
            failed = f"{type(err).__name__}: {err}"
            ids = [p.request_id for p in plan.prefills] + [d.request_id for d in plan.decodes]
            results = {rid: RequestResult(error=failed) for rid in ids}
        out = self.scheduler.commit(StepResult(results))
        self._free(out.freed_slots)
        events = [*plan.events, *out.events]
        for ev in events:
            if ev.finished:
                self.seeds.pop(ev.request_id, None)
        return events

    def pop_output(self, request_id: str) -> Output | None:
        return self.outputs.pop(request_id, None)

    # -- internals --------------------------------------------------------------------
    def _free(self, slots: Sequence[int]) -> None:
        if not slots:
            return
        self.target.free(slots)
        if self.draft is not None:
            self.draft.free(slots)
        for s in slots:
            self.draft_seen.pop(s, None)

    def _prefill(self, plan: StepPlan, results: dict[str, RequestResult]) -> None:
        if not plan.prefills:
            return
        items = [PrefillItem(p.slot, p.token_ids, len(p.request.prompt_ids), p.request.sampling,
                             self.seeds[p.request_id]) for p in plan.prefills]
        for p, em in zip(plan.prefills, self.target.prefill(items)):
            self.draft_seen[p.slot] = 0
            self._record(p.request_id, em)
            results[p.request_id] = RequestResult(em.token_ids)

    def _decode(self, plan: StepPlan, results: dict[str, RequestResult]) -> None:
        if not plan.decodes:
            return
        drafts: list[tuple[int, ...]] = [() for _ in plan.decodes]
        speculating = self.draft is not None and plan.max_k > 0
        start = self.clock()
        if speculating:
            assert self.draft is not None
            items = []
            for d in plan.decodes:
                seq = d.request.all_token_ids
                seen = self.draft_seen.get(d.slot, 0)
                items.append(ProposeItem(d.slot, tuple(seq[seen:]), d.k))
                self.draft_seen[d.slot] = len(seq)
            drafts = [tuple(t[:d.k]) for d, t in zip(plan.decodes, self.draft.propose(items))]
        drafted_at = self.clock()
        verified = self.target.verify([VerifyItem(d.slot, t) for d, t in zip(plan.decodes,
                                                                              drafts)])
        if speculating:
            self._observe_cost((drafted_at - start) / plan.max_k, self.clock() - drafted_at)
        for d, t, em in zip(plan.decodes, drafts, verified):
            self._record(d.request_id, em)
            results[d.request_id] = RequestResult(em.token_ids, drafted=len(t),
                                                  accepted=em.accepted)

    def _observe_cost(self, draft_step: float, target_step: float) -> None:
        if not self.measure_cost or target_step <= 0:
            return
        ratio = min(draft_step / target_step, 2.0)  # a draft's first catch-up is a prefill
        old = self.cost_ratio
        self.cost_ratio = ratio if old is None else (1 - COST_EMA) * old + COST_EMA * ratio
        self.scheduler.update(draft_cost_ratio=self.cost_ratio)

    def _record(self, request_id: str, em: Emitted) -> None:
        out = self.outputs.get(request_id)
        if out is not None and em.logprobs:
            out.logprobs.extend(em.logprobs)
