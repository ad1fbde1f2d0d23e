"""Adaptive speculation policy (scheduler/policy.py) and runtime speculation settings."""

from __future__ import annotations

import pytest

from scheduler import Request, RequestResult, Scheduler, SchedulerConfig, StepResult
from scheduler.policy import (
    AcceptanceEstimate,
    SpecSettings,
    choose_k,
    expected_tokens,
    speculation_length,
)


def test_expected_tokens_matches_the_geometric_sum():
    assert expected_tokens(1.0, 4) == 5
    assert expected_tokens(0.0, 4) == 1
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(0.8, 0) == pytest.approx(1)


def test_choose_k_grows_with_acceptance_and_is_zero_when_drafts_do_not_pay():
    ks = [choose_k(a, 8, 0.1) for a in (0.02, 0.3, 0.6, 0.8, 0.9, 0.99)]
    assert ks[0] == 0
    assert ks == sorted(ks) and ks[-1] > ks[1] >= 1
    assert choose_k(0.99, 8, 0.1) == 8
    assert choose_k(0.5, 6, 0.0) == 6  # free drafts: always the cap
    assert choose_k(0.5, 6, 1.0) == 0  # drafts as dear as the target: never worth it
    assert choose_k(0.9, 0, 0.1) == 0


def test_choose_k_maximises_tokens_per_cost():
    for alpha in (0.2, 0.5, 0.7, 0.95):
        k = choose_k(alpha, 8, 0.15)
        best = max(expected_tokens(alpha, j) / (1 + 0.15 * j) for j in range(9))
        assert expected_tokens(alpha, k) / (1 + 0.15 * k) == pytest.approx(best)


def test_estimate_follows_acceptance_and_recovers_to_probe_after_k_zero():
    est = AcceptanceEstimate()
    for _ in range(30):
        est.observe(drafted=4, accepted=4)
    assert est.alpha > 0.9
    for _ in range(100):
        est.observe(drafted=2, accepted=0)
    assert est.alpha < 0.05 and choose_k(est.alpha, 4, 0.1) == 0
    steps_at_zero = 0
    while choose_k(est.alpha, 4, 0.1) == 0:
        est.observe(drafted=0, accepted=0)  # k = 0 steps: no evidence, only decay
        steps_at_zero += 1
    assert 5 < steps_at_zero < 100  # backs off for a while, then probes again


def test_speculation_length_respects_settings_and_caps():
    est = AcceptanceEstimate(accepted=100.0)  # alpha ~ 1
    assert speculation_length(SpecSettings(4, True, 0.1), est, cap=10) == 4
    assert speculation_length(SpecSettings(4, True, 0.1), est, cap=2) == 2
    assert speculation_length(SpecSettings(0, True, 0.1), est, cap=10) == 0
    low = AcceptanceEstimate(rejected=100.0)
    assert speculation_length(SpecSettings(4, True, 0.1), low, cap=10) == 0
    assert speculation_length(SpecSettings(4, False, 0.1), low, cap=10) == 4
    assert speculation_length(SpecSettings(4, False, 0.1), low, cap=-1) == 0


def drive_ks(agree_all: bool, steps: int = 15) -> list[int]:
    """k chosen for one request whose drafts are always (or never) accepted."""
    sched = Scheduler(SchedulerConfig(max_slots=1, max_seq_len=256, k_max=5), str)
    sched.add(Request("a", [1], max_tokens=200))
    sched.schedule()
    sched.commit(StepResult({"a": RequestResult([1])}))
    ks = []
    for _ in range(steps):
        plan = sched.schedule()
        k = plan.decodes[0].k
        ks.append(k)
        acc = k if agree_all else 0
        sched.commit(StepResult({"a": RequestResult([1] * (acc + 1), drafted=k, accepted=acc)}))
    return ks


def test_scheduler_speculates_long_for_high_acceptance_and_stops_for_none():
    assert drive_ks(agree_all=True)[-5:] == [5] * 5
    never = drive_ks(agree_all=False, steps=60)[-16:]
    assert never.count(0) >= 13 and max(never) == 1  # mostly off, with rare k = 1 probes


def make(**kw) -> Scheduler:
    return Scheduler(SchedulerConfig(**{"max_slots": 2, "max_seq_len": 64, **kw}), str)


def test_runtime_update_of_k_max_and_adaptive_applies_from_the_next_step():
    sched = make(k_max=6, adaptive=False)
    sched.add(Request("a", [1], max_tokens=50))
    sched.add(Request("capped", [1], max_tokens=50, num_speculative_tokens=2))
    sched.schedule()
    sched.commit(StepResult({"a": RequestResult([1]), "capped": RequestResult([1])}))

    def ks() -> dict[str, int]:
        plan = sched.schedule()
        out = {d.request_id: d.k for d in plan.decodes}
        results = {rid: RequestResult([1], drafted=k, accepted=0) for rid, k in out.items()}
        sched.commit(StepResult(results))
        return out

    assert ks() == {"a": 6, "capped": 2}
    sched.update(k_max=3)
    assert ks() == {"a": 3, "capped": 2}
    sched.update(k_max=0)
    assert ks() == {"a": 0, "capped": 0}
    sched.update(k_max=6, adaptive=True, draft_cost_ratio=0.05)
    assert sched.settings == SpecSettings(6, True, 0.05)
    assert ks()["a"] < 6  # every draft so far was rejected
    with pytest.raises(ValueError, match="exceeds config.k_max"):
        sched.update(k_max=7)
    with pytest.raises(ValueError, match="draft_cost_ratio"):
        sched.update(draft_cost_ratio=-1.0)
    assert sched.settings == SpecSettings(6, True, 0.05)


def test_k_never_drafts_past_max_tokens():
    sched = make(k_max=6, adaptive=False)
    sched.add(Request("a", [1], max_tokens=4))
    sched.schedule()
    sched.commit(StepResult({"a": RequestResult([1])}))
    plan = sched.schedule()
    assert plan.decodes[0].k == 2  # 3 tokens left: 2 drafts + the target's token
