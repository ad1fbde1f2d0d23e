"""Scheduler lifecycle, admission, batching, cancellation and preemption, driven by a fake
deterministic engine that also checks the slot discipline the plan promises."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import (
    CommitOutput,
    Request,
    RequestResult,
    RequestStatus,
    Scheduler,
    SchedulerConfig,
    StepPlan,
    StepResult,
)

VOCAB_SIZE = 50


def detok(ids: Sequence[int]) -> str:
    return "".join(f"<{i}>" for i in ids)


def target_next(seq: Sequence[int]) -> int:
    """The fake target model: greedy next token as a function of the whole sequence."""
    return (sum(seq) * 7 + len(seq) * 3 + seq[-1]) % VOCAB_SIZE


def draft_next(seq: Sequence[int], agree: int) -> int:
    """The fake draft: agrees with the target on about `agree` percent of sequences."""
    t = target_next(seq)
    return t if (sum(seq) * 13 + len(seq) * 5) % 100 < agree else (t + 1) % VOCAB_SIZE


class FakeEngine:
    """Runs plans like a real engine would (greedy speculative decoding: draft k, verify,
    keep the agreeing prefix plus the target's token), and asserts that slots are freed
    before reuse and that each prefill recomputes the request's full sequence."""

    def __init__(self, agree: int = 70) -> None:
        self.agree = agree
        self.slots: dict[int, str] = {}

    def run(self, plan: StepPlan) -> StepResult:
        for slot in plan.freed_slots:
            del self.slots[slot]
        assert plan.decode_bucket >= len(plan.decodes)
        results = {}
        for p in plan.prefills:
            assert p.slot not in self.slots, "prefill into a slot that was not freed"
            assert list(p.token_ids) == p.request.all_token_ids
            self.slots[p.slot] = p.request_id
            results[p.request_id] = RequestResult([target_next(p.token_ids)])
        for d in plan.decodes:
            assert self.slots[d.slot] == d.request_id
            results[d.request_id] = self.speculate(d.request.all_token_ids, d.k)
        return StepResult(results)

    def speculate(self, seq: list[int], k: int) -> RequestResult:
        drafts: list[int] = []
        for _ in range(k):
            drafts.append(draft_next(seq + drafts, self.agree))
        out: list[int] = []
        for d in drafts:
            t = target_next(seq + out)
            out.append(t)
            if t != d:
                return RequestResult(out, drafted=k, accepted=len(out) - 1)
        out.append(target_next(seq + out))
        return RequestResult(out, drafted=k, accepted=k)

    def free(self, out: CommitOutput) -> None:
        for slot in out.freed_slots:
            del self.slots[slot]


def reference_output(prompt: list[int], n: int) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(target_next(seq))
    return seq[len(prompt) :]


def step(sched: Scheduler, engine: FakeEngine) -> tuple[StepPlan, CommitOutput]:
    plan = sched.schedule()
    out = sched.commit(engine.run(plan))
    engine.free(out)
    check_invariants(sched, engine)
    return plan, out


def drain(sched: Scheduler, engine: FakeEngine, max_steps: int = 10_000) -> list[StepPlan]:
    plans = []
    while sched.has_unfinished():
        plans.append(step(sched, engine)[0])
        assert len(plans) < max_steps
    return plans


def check_invariants(sched: Scheduler, engine: FakeEngine) -> None:
    cfg = sched.config
    assert sched.num_free_slots + len(sched.running) == cfg.max_slots
    assert sched.kv_used == sum(r.kv_tokens for r in sched.running) <= cfg.kv_capacity_tokens
    assert sorted(engine.slots) == sorted(r.slot for r in sched.running)  # type: ignore[type-var]
    assert all(r.status is RequestStatus.RUNNING for r in sched.running)
    assert all(r.status is RequestStatus.WAITING and r.slot is None for r in sched.waiting)
    keys = [(r.priority, r.arrival) for r in sched.waiting]
    assert keys == sorted(keys)


def make_sched(**kw) -> Scheduler:
    return Scheduler(SchedulerConfig(**{"max_slots": 4, "max_seq_len": 64, **kw}), detok)


def req(rid: str, n_prompt: int = 4, max_tokens: int = 8, **kw) -> Request:
    prompt = [(hash(rid) + i) % VOCAB_SIZE for i in range(n_prompt)]
    return Request(rid, prompt, max_tokens=max_tokens, **kw)


def test_scheduler_imports_no_torch_numpy_models_sampler_or_ray():
    code = (
        "import sys, scheduler, scheduler.scheduler;"
        "bad = {'torch', 'numpy', 'models', 'sampler', 'ray'} & "
        "{m.split('.')[0] for m in sys.modules}; print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lifecycle_waiting_running_finished_with_exact_output():
    sched, engine = make_sched(), FakeEngine()
    r = req("a", max_tokens=10)
    sched.add(r)
    assert r.status is RequestStatus.WAITING
    plan, out = step(sched, engine)
    assert [p.request_id for p in plan.prefills] == ["a"] and r.status is RequestStatus.RUNNING
    streamed = list(out.events[0].token_ids)
    while sched.has_unfinished():
        streamed += [t for e in step(sched, engine)[1].events for t in e.token_ids]
    assert r.status is RequestStatus.FINISHED and r.finish_reason == "length"
    assert r.output_ids == streamed == reference_output(r.prompt_ids, 10)
    assert sched.num_free_slots == 4 and sched.kv_used == 0
    assert sched.stats().requests_by_status == {"finished": 1}


def test_add_rejects_empty_prompt_too_long_and_duplicates():
    sched = make_sched(max_seq_len=16)
    with pytest.raises(ValueError, match="empty prompt"):
        sched.add(Request("e", []))
    with pytest.raises(ValueError, match="exceeds max_seq_len 16"):
        sched.add(req("long", n_prompt=10, max_tokens=7))
    sched.add(req("ok", n_prompt=10, max_tokens=6))
    with pytest.raises(ValueError, match="duplicate"):
        sched.add(req("ok"))


def test_fifo_within_priority_lower_priority_value_first():
    sched, engine = make_sched(max_slots=1), FakeEngine()
    for rid, prio in [("a", 1), ("b", 0), ("c", 1), ("d", 0), ("e", 2)]:
        sched.add(req(rid, max_tokens=2, priority=prio))
    order = [p.request_id for plan in drain(sched, engine) for p in plan.prefills]
    assert order == ["b", "d", "a", "c", "e"]


def test_admission_limited_by_free_slots():
    sched = make_sched(max_slots=2)
    for rid in "abc":
        sched.add(req(rid))
    assert [p.request_id for p in sched.schedule().prefills] == ["a", "b"]


def test_admission_limited_by_kv_capacity():
    sched = make_sched(max_seq_len=20, kv_capacity_tokens=25)
    for rid in "abc":
        sched.add(req(rid, n_prompt=10, max_tokens=5))
    plan = sched.schedule()
    assert [p.request_id for p in plan.prefills] == ["a", "b"]
    assert sched.kv_used == 20


def test_admission_limited_by_token_budget_and_no_overtaking():
    sched = make_sched(max_seq_len=32, max_tokens_per_step=32)
    sched.add(req("a", n_prompt=12))
    sched.add(req("b", n_prompt=12))
    sched.add(req("big", n_prompt=20))
    sched.add(req("small", n_prompt=2))  # would fit, but may not overtake "big"
    assert [p.request_id for p in sched.schedule().prefills] == ["a", "b"]


def test_decodes_fit_the_token_budget_by_shortening_drafts():
    sched = make_sched(max_seq_len=16, max_tokens_per_step=16, k_max=4, adaptive=False)
    engine = FakeEngine()
    for rid in "abcd":
        sched.add(req(rid, n_prompt=3, max_tokens=12))
    step(sched, engine)
    plan = sched.schedule()
    assert sum(d.k + 1 for d in plan.decodes) <= 16
    assert sorted(d.k for d in plan.decodes) == [3, 3, 3, 3]


def test_decode_batch_is_padded_to_the_bucket():
    cfg = SchedulerConfig(max_slots=6, max_seq_len=64)
    assert cfg.batch_buckets == (1, 2, 4, 6)
    assert [cfg.bucket(n) for n in range(7)] == [0, 1, 2, 4, 4, 6, 6]
    sched, engine = make_sched(max_slots=6), FakeEngine()
    for rid in "abc":
        sched.add(req(rid))
    step(sched, engine)
    plan = sched.schedule()
    assert (len(plan.decodes), plan.decode_bucket) == (3, 4)
    with pytest.raises(ValueError, match="largest batch bucket"):
        SchedulerConfig(max_slots=8, batch_buckets=(1, 2, 4))
    with pytest.raises(ValueError, match="increasing"):
        SchedulerConfig(max_slots=4, batch_buckets=(4, 2))


def test_config_rejects_unusable_limits():
    with pytest.raises(ValueError, match="kv_capacity_tokens"):
        SchedulerConfig(max_seq_len=64, kv_capacity_tokens=32)
    with pytest.raises(ValueError, match="max_tokens_per_step"):
        SchedulerConfig(max_seq_len=64, max_tokens_per_step=32)


def test_abort_takes_effect_at_the_next_step_and_frees_the_slot():
    sched, engine = make_sched(), FakeEngine()
    for rid in "abc":
        sched.add(req(rid, max_tokens=20))
    step(sched, engine)
    sched.add(req("w"))
    slot_b = sched.get("b").slot  # type: ignore[union-attr]
    assert sched.abort("b") and sched.abort("w", error="grammar failed")
    assert sched.get("b").status is RequestStatus.RUNNING  # type: ignore[union-attr]
    plan, _ = step(sched, engine)
    assert plan.freed_slots == (slot_b,)
    assert {(e.request_id, e.status, e.finish_reason) for e in plan.events} == {
        ("b", RequestStatus.ABORTED, "abort"),
        ("w", RequestStatus.FAILED, "error: grammar failed"),
    }
    assert "b" not in {d.request_id for d in plan.decodes}
    assert not sched.abort("b") and not sched.abort("nope")


def test_abort_during_a_step_keeps_its_tokens_and_frees_at_the_next_boundary():
    sched, engine = make_sched(), FakeEngine()
    sched.add(req("a", max_tokens=20))
    step(sched, engine)
    plan = sched.schedule()
    sched.abort("a")  # the step is already running
    out = sched.commit(engine.run(plan))
    engine.free(out)
    assert out.events[0].token_ids and not out.freed_slots
    plan, _ = step(sched, engine)
    assert plan.freed_slots and plan.events[0].status is RequestStatus.ABORTED
    assert not plan.decodes and not sched.has_unfinished() and sched.num_free_slots == 4


def test_engine_error_fails_the_request_and_frees_its_slot():
    sched, engine = make_sched(), FakeEngine()
    sched.add(req("a"))
    sched.add(req("b"))
    step(sched, engine)
    plan = sched.schedule()
    result = engine.run(plan)
    results = dict(result.results, a=RequestResult(error="nan logits"))
    out = sched.commit(StepResult(results))
    engine.free(out)
    event = next(e for e in out.events if e.request_id == "a")
    assert (event.status, event.finish_reason) == (RequestStatus.FAILED, "error: nan logits")
    assert len(out.freed_slots) == 1
    check_invariants(sched, engine)


def test_step_protocol_misuse_is_rejected():
    sched, engine = make_sched(k_max=2, adaptive=False), FakeEngine()
    sched.add(req("a"))
    step(sched, engine)
    sched.schedule()
    with pytest.raises(RuntimeError, match="before commit"):
        sched.schedule()
    with pytest.raises(ValueError, match="missing"):
        sched.commit(StepResult({}))
    with pytest.raises(ValueError, match="accepted"):
        sched.commit(StepResult({"a": RequestResult([1, 2], drafted=2, accepted=0)}))
    sched.commit(StepResult({"a": RequestResult([1, 2, 3], drafted=2, accepted=2)}))
    with pytest.raises(RuntimeError, match="without a scheduled step"):
        sched.commit(StepResult({}))


def test_preemption_under_small_kv_resumes_with_identical_output():
    """A cache for ~2.5 full requests, 6 requests: preemption must happen, and every request
    must still produce exactly its unpreempted (reference) output."""
    sched = make_sched(max_slots=6, max_seq_len=40, kv_capacity_tokens=100, k_max=4)
    engine = FakeEngine(agree=80)
    reqs = [req(f"r{i}", n_prompt=8 + i, max_tokens=30 - i, priority=i % 2) for i in range(6)]
    for r in reqs:
        sched.add(r)
    streamed: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    while sched.has_unfinished():
        for e in step(sched, engine)[1].events:
            streamed[e.request_id] += e.token_ids
    assert sched.stats().num_preemptions > 0
    assert any(r.num_preemptions for r in reqs)
    for r in reqs:
        assert r.status is RequestStatus.FINISHED and r.finish_reason == "length"
        assert r.output_ids == streamed[r.request_id]
        assert r.output_ids == reference_output(r.prompt_ids, r.max_tokens)


def test_preemption_victim_is_the_latest_admitted_of_the_lowest_priority():
    sched = make_sched(max_slots=3, max_seq_len=30, kv_capacity_tokens=36, k_max=0)
    engine = FakeEngine()
    sched.add(req("hi_old", n_prompt=10, max_tokens=20, priority=0))
    sched.add(req("lo_old", n_prompt=10, max_tokens=20, priority=1))
    sched.add(req("lo_new", n_prompt=10, max_tokens=20, priority=1))
    step(sched, engine)  # 30 KV tokens used; each step adds 3
    for _ in range(3):
        plan, _ = step(sched, engine)
        if plan.preempted:
            break
    assert plan.preempted == ("lo_new",)
    assert sched.waiting[0].request_id == "lo_new"


def run_random_workload(seed: int, n_requests: int) -> tuple[Scheduler, list[Request]]:
    rng = random.Random(seed)
    sched = make_sched(max_slots=8, max_seq_len=48, kv_capacity_tokens=160, k_max=4)
    engine = FakeEngine(agree=rng.randint(0, 100))
    reqs = [
        req(f"r{i}", n_prompt=rng.randint(1, 20), max_tokens=rng.randint(1, 28),
            priority=rng.randint(0, 2), stop=("<7>",) if i % 5 == 0 else ())
        for i in range(n_requests)
    ]
    pending = list(reqs)
    while pending or sched.has_unfinished():
        for _ in range(rng.randint(0, 4)):
            if pending:
                sched.add(pending.pop())
        for r in list(sched.running) + list(sched.waiting):
            if rng.random() < 0.01:
                sched.abort(r.request_id)
        step(sched, engine)
    assert not engine.slots
    return sched, reqs


def test_200_requests_with_random_cancellations_leak_no_slot_or_kv():
    sched, reqs = run_random_workload(seed=0, n_requests=200)
    stats = sched.stats()
    assert sched.num_free_slots == 8 and sched.kv_used == 0 and not sched._live
    assert stats.requests_added == sum(stats.requests_by_status.values()) == 200
    assert stats.requests_by_status["aborted"] > 0 and stats.num_preemptions > 0
    for r in reqs:  # finished or cut short, every output is a prefix of the greedy output
        assert r.output_ids == reference_output(r.prompt_ids, len(r.output_ids))
        if r.status is RequestStatus.FINISHED and r.finish_reason == "length":
            assert len(r.output_ids) == r.max_tokens


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 12), st.integers(1, 12), st.integers(0, 2)),
        st.tuples(st.just("abort"), st.integers(0, 30), st.just(0), st.just(0)),
        st.tuples(st.just("step"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops, agree=st.integers(0, 100))
def test_any_add_abort_step_sequence_keeps_slot_and_kv_accounting(ops, agree):
    """Invariants after every operation: free slots + running = max_slots, kv_used = sum of
    the running requests' KV, engine-side slots match; and nothing leaks once drained."""
    sched = make_sched(max_slots=3, max_seq_len=24, kv_capacity_tokens=30, k_max=3)
    engine = FakeEngine(agree=agree)
    ids: list[str] = []
    for op, a, b, prio in ops:
        if op == "add":
            ids.append(f"r{len(ids)}")
            sched.add(req(ids[-1], n_prompt=a, max_tokens=b, priority=prio))
        elif op == "abort" and ids:
            sched.abort(ids[a % len(ids)])
        elif op == "step":
            step(sched, engine)
    for rid in ids:
        sched.abort(rid)
    drain(sched, engine)
    assert sched.num_free_slots == 3 and sched.kv_used == 0 and not engine.slots
    assert sum(sched.stats().requests_by_status.values()) == len(ids)


def test_per_request_and_engine_speculation_counters_agree():
    sched, engine = make_sched(k_max=4, adaptive=False), FakeEngine(agree=60)
    reqs = [req(f"r{i}", max_tokens=30) for i in range(4)]
    for r in reqs:
        sched.add(r)
    drain(sched, engine)
    stats = sched.stats()
    assert stats.drafted_tokens == sum(r.stats.total_drafted for r in reqs) > 0
    assert stats.accepted_tokens == sum(r.stats.total_accepted for r in reqs) > 0
    assert stats.emitted_tokens == sum(len(r.output_ids) for r in reqs) == 120
    assert sum(stats.acceptance_length_hist.values()) == sum(
        1 for r in reqs for d in r.stats.drafted if d
    )
    for r in reqs:
        s = r.stats
        assert s.position_proposed[0] == sum(1 for d in s.drafted if d)
        assert s.position_accepted[0] == sum(1 for a in s.accepted if a)
        assert all(a <= p for a, p in zip(s.position_accepted, s.position_proposed))
        assert s.position_proposed == sorted(s.position_proposed, reverse=True)
        assert sum(s.position_accepted) == s.total_accepted
