"""The scheduler: which requests run each step, with how many drafts, and what they emitted.

One step is `plan = schedule()`, the engine runs it, then `commit(StepResult)`. schedule():
1. applies aborts requested since the last step (their slots go into plan.freed_slots);
2. plans a decode for every running request with k_i from the policy, then fits the step into
   the KV capacity and the token budget: first by shortening the longest drafts, then by
   preempting the most recently admitted request of the lowest priority (it returns to the
   waiting queue, ahead of later arrivals of its priority, and is recomputed on re-admission);
3. admits waiting requests in (priority, arrival) order while a slot, their KV and the token
   budget allow, stopping at the first that does not fit (no overtaking within the queue), and
   admitting none in a step that preempted.
commit() applies the stop conditions to each request's tokens and ends finished requests.
A waiting request of higher priority does not preempt running ones; it is admitted first.

The engine loop:

    plan = scheduler.schedule()
    engine.free(plan.freed_slots); stream(plan.events)   # aborted, failed, preempted
    result = engine.run(plan)                            # -> StepResult
    out = scheduler.commit(result)
    stream(out.events); engine.free(out.freed_slots)     # finished this step
"""

from __future__ import annotations

import bisect
import itertools

from scheduler.config import SchedulerConfig
from scheduler.policy import SpecSettings, speculation_length
from scheduler.request import Request, RequestStatus
from scheduler.resources import Resources
from scheduler.stats import Counters, EngineStats
from scheduler.step import (
    CommitOutput,
    Decode,
    Prefill,
    RequestEvent,
    RequestResult,
    StepPlan,
    StepResult,
)
from scheduler.stops import Detokenize, check_chunk

Entry = Prefill | Decode


def _queue_key(request: Request) -> tuple[int, int]:
    return request.priority, request.arrival


class Scheduler:
    def __init__(self, config: SchedulerConfig, detokenize: Detokenize) -> None:
        self.config = config
        self.detokenize = detokenize
        self.settings = SpecSettings(config.k_max, config.adaptive, config.draft_cost_ratio)
        self.resources = Resources(config.max_slots, config.kv_capacity_tokens)
        self.waiting: list[Request] = []  # sorted by (priority, arrival)
        self.running: list[Request] = []  # in admission order
        self.counters = Counters()
        self._live: dict[str, Request] = {}
        self._aborts: dict[str, str | None] = {}
        self._inflight: dict[str, Entry] | None = None
        self._arrivals = itertools.count()
        self._admissions = itertools.count()

    # ---- requests in and out

    def add(self, request: Request) -> None:
        """Queue a new request; ValueError if it can never run."""
        if request.request_id in self._live:
            raise ValueError(f"duplicate request_id {request.request_id!r}")
        if not request.prompt_ids:
            raise ValueError(f"{request.request_id}: empty prompt")
        if request.status is not RequestStatus.WAITING or request.output_ids:
            raise ValueError(f"{request.request_id}: request was already scheduled")
        total = len(request.prompt_ids) + request.max_tokens
        if total > self.config.max_seq_len:
            raise ValueError(
                f"{request.request_id}: prompt ({len(request.prompt_ids)} tokens) + max_tokens "
                f"({request.max_tokens}) = {total} exceeds max_seq_len {self.config.max_seq_len}"
            )
        request.arrival = next(self._arrivals)
        self._live[request.request_id] = request
        bisect.insort(self.waiting, request, key=_queue_key)
        self.counters.requests_added += 1

    def abort(self, request_id: str, error: str | None = None) -> bool:
        """End a request at the next step boundary: ABORTED, or FAILED with `error`.
        False if it is unknown or already over."""
        if request_id not in self._live:
            return False
        self._aborts[request_id] = error
        return True

    def update(
        self,
        *,
        k_max: int | None = None,
        adaptive: bool | None = None,
        draft_cost_ratio: float | None = None,
    ) -> SpecSettings:
        """Change speculation settings from the next schedule(); k_max <= config.k_max."""
        old = self.settings
        settings = SpecSettings(
            k_max=old.k_max if k_max is None else k_max,
            adaptive=old.adaptive if adaptive is None else adaptive,
            draft_cost_ratio=old.draft_cost_ratio if draft_cost_ratio is None else draft_cost_ratio,
        )
        if settings.k_max > self.config.k_max:
            raise ValueError(f"k_max {settings.k_max} exceeds config.k_max {self.config.k_max}")
        self.settings = settings
        return settings

    # ---- one step

    def schedule(self) -> StepPlan:
        if self._inflight is not None:
            raise RuntimeError("schedule() called before commit() of the previous step")
        events, freed = self._apply_aborts()
        decodes, preempted = self._plan_decodes()
        freed += [slot for _, slot in preempted]
        budget = self.config.max_tokens_per_step - sum(d.k + 1 for d in decodes)
        prefills = [] if preempted else self._admit(budget)
        entries: list[Entry] = [*prefills, *decodes]
        self._inflight = {e.request_id: e for e in entries}
        return StepPlan(
            prefills=tuple(prefills),
            decodes=tuple(decodes),
            decode_bucket=self.config.bucket(len(decodes)),
            freed_slots=tuple(freed),
            preempted=tuple(r.request_id for r, _ in preempted),
            events=tuple(events),
        )

    def commit(self, step: StepResult) -> CommitOutput:
        if self._inflight is None:
            raise RuntimeError("commit() without a scheduled step")
        self._validate(self._inflight, step)
        inflight, self._inflight = self._inflight, None
        self.counters.num_steps += 1
        events, freed = [], []
        for request_id, entry in inflight.items():
            event, slot = self._commit_one(entry, step.results[request_id])
            events.append(event)
            if slot is not None:
                freed.append(slot)
        return CommitOutput(tuple(events), tuple(freed))

    # ---- queries

    def get(self, request_id: str) -> Request | None:
        return self._live.get(request_id)

    def has_unfinished(self) -> bool:
        return bool(self._live)

    @property
    def num_free_slots(self) -> int:
        return self.resources.num_free_slots

    @property
    def kv_used(self) -> int:
        return self.resources.kv_used

    def stats(self) -> EngineStats:
        return self.counters.snapshot(len(self.waiting), len(self.running))

    # ---- schedule() parts

    def _apply_aborts(self) -> tuple[list[RequestEvent], list[int]]:
        events, freed = [], []
        aborts, self._aborts = self._aborts, {}
        for request_id, error in aborts.items():
            request = self._live.get(request_id)
            if request is None:
                continue
            status = RequestStatus.FAILED if error is not None else RequestStatus.ABORTED
            slot = self._finish(request, status, f"error: {error}" if error else "abort")
            events.append(_final_event(request))
            if slot is not None:
                freed.append(slot)
        return events, freed

    def _plan_decodes(self) -> tuple[list[Decode], list[tuple[Request, int]]]:
        ks = {r.request_id: self._speculation_length(r) for r in self.running}
        preempted = []
        while self._over_budget(ks):
            if not self._shorten_drafts(ks):
                victim = max(self.running, key=_queue_key_admitted)
                del ks[victim.request_id]
                preempted.append((victim, self._preempt(victim)))
        for r in self.running:
            self.resources.resize(r, r.num_tokens + ks[r.request_id])
        decodes = [Decode(r, _slot(r), ks[r.request_id]) for r in self.running]
        return decodes, preempted

    def _speculation_length(self, request: Request) -> int:
        cap = request.tokens_left - 1
        if request.num_speculative_tokens is not None:
            cap = min(cap, request.num_speculative_tokens)
        return speculation_length(self.settings, request.acceptance, cap)

    def _over_budget(self, ks: dict[str, int]) -> bool:
        kv = sum(r.num_tokens + ks[r.request_id] for r in self.running)
        tokens = sum(k + 1 for k in ks.values())
        return kv > self.resources.kv_capacity or tokens > self.config.max_tokens_per_step

    def _shorten_drafts(self, ks: dict[str, int]) -> bool:
        """Take one draft off the longest (latest admitted on ties); False if none is left."""
        if not any(ks.values()):
            return False
        longest = max(self.running, key=lambda r: (ks[r.request_id], r.admission))
        ks[longest.request_id] -= 1
        return True

    def _preempt(self, request: Request) -> int:
        self.running.remove(request)
        slot = self.resources.release(request)
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.counters.num_preemptions += 1
        bisect.insort(self.waiting, request, key=_queue_key)
        return slot

    def _admit(self, budget: int) -> list[Prefill]:
        prefills = []
        while self.waiting and self._fits(self.waiting[0], budget):
            request = self.waiting.pop(0)
            budget -= request.num_tokens
            slot = self.resources.admit(request, request.num_tokens)
            request.status = RequestStatus.RUNNING
            request.admission = next(self._admissions)
            self.running.append(request)
            prefills.append(Prefill(request, slot, tuple(request.all_token_ids)))
        return prefills

    def _fits(self, request: Request, budget: int) -> bool:
        return request.num_tokens <= budget and self.resources.can_admit(request.num_tokens)

    # ---- commit() parts

    def _validate(self, inflight: dict[str, Entry], step: StepResult) -> None:
        missing = inflight.keys() - step.results.keys()
        extra = step.results.keys() - inflight.keys()
        if missing or extra:
            raise ValueError(f"step results missing {sorted(missing)}, unexpected {sorted(extra)}")
        for request_id, entry in inflight.items():
            _check_result(entry, step.results[request_id])

    def _commit_one(self, entry: Entry, result: RequestResult) -> tuple[RequestEvent, int | None]:
        request = entry.request
        if result.error is not None:
            slot = self._finish(request, RequestStatus.FAILED, f"error: {result.error}")
            return _final_event(request), slot
        if isinstance(entry, Decode):
            self._record_decode(request, result)
        outcome = check_chunk(
            request.text, request.criteria, len(request.output_ids), result.token_ids,
            self.detokenize,
        )
        request.output_ids.extend(outcome.token_ids)
        self.counters.emitted_tokens += len(outcome.token_ids)
        slot = None
        if outcome.reason is None:
            self.resources.resize(request, request.num_tokens - 1)  # cached after rollback
        else:
            slot = self._finish(request, RequestStatus.FINISHED, outcome.reason)
        event = RequestEvent(
            request.request_id, tuple(outcome.token_ids), outcome.text, request.status,
            request.finish_reason,
        )
        return event, slot

    def _record_decode(self, request: Request, result: RequestResult) -> None:
        request.stats.record(result.drafted, result.accepted)
        request.acceptance.observe(result.drafted, result.accepted)
        self.counters.record_draft(result.drafted, result.accepted)

    def _finish(self, request: Request, status: RequestStatus, reason: str) -> int | None:
        """End a live request; the slot it held, if it was running."""
        slot = None
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
            slot = self.resources.release(request)
        else:
            self.waiting.remove(request)
        request.status, request.finish_reason = status, reason
        del self._live[request.request_id]
        self._aborts.pop(request.request_id, None)
        self.counters.requests_by_status[status.value] += 1
        return slot


def _queue_key_admitted(request: Request) -> tuple[int, int]:
    """Preemption order: the lowest priority (largest value), then the latest admitted."""
    return request.priority, request.admission


def _final_event(request: Request) -> RequestEvent:
    return RequestEvent(request.request_id, (), "", request.status, request.finish_reason)


def _slot(request: Request) -> int:
    if request.slot is None:
        raise RuntimeError(f"running request {request.request_id} has no slot")
    return request.slot


def _check_result(entry: Entry, result: RequestResult) -> None:
    if result.error is not None:
        return
    k = entry.k if isinstance(entry, Decode) else 0
    n = len(result.token_ids)
    if not 0 <= result.accepted <= result.drafted <= k or n != result.accepted + 1:
        raise ValueError(
            f"{entry.request_id}: got {n} tokens, drafted={result.drafted}, "
            f"accepted={result.accepted} for k={k} (need accepted <= drafted <= k, "
            "tokens = accepted + 1)"
        )
