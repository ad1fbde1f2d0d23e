"""Engine-level counters, for the metrics exporter: a mutable tally and a frozen snapshot."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineStats:
    """A snapshot. acceptance_length_hist maps tokens emitted by a speculative step (accepted
    drafts + 1) to how many steps emitted that many; steps with k = 0 are not in it."""

    requests_added: int
    requests_by_status: dict[str, int]
    num_waiting: int
    num_running: int
    num_steps: int
    num_preemptions: int
    drafted_tokens: int
    accepted_tokens: int
    emitted_tokens: int
    acceptance_length_hist: dict[int, int]

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        steps = sum(self.acceptance_length_hist.values())
        lengths = sum(n * c for n, c in self.acceptance_length_hist.items())
        return lengths / steps if steps else 0.0


@dataclass
class Counters:
    requests_added: int = 0
    requests_by_status: Counter[str] = field(default_factory=Counter)
    num_steps: int = 0
    num_preemptions: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    emitted_tokens: int = 0
    acceptance_length_hist: Counter[int] = field(default_factory=Counter)

    def record_draft(self, drafted: int, accepted: int) -> None:
        if drafted:
            self.drafted_tokens += drafted
            self.accepted_tokens += accepted
            self.acceptance_length_hist[accepted + 1] += 1

    def snapshot(self, num_waiting: int, num_running: int) -> EngineStats:
        return EngineStats(
            requests_added=self.requests_added,
            requests_by_status=dict(self.requests_by_status),
            num_waiting=num_waiting,
            num_running=num_running,
            num_steps=self.num_steps,
            num_preemptions=self.num_preemptions,
            drafted_tokens=self.drafted_tokens,
            accepted_tokens=self.accepted_tokens,
            emitted_tokens=self.emitted_tokens,
            acceptance_length_hist=dict(self.acceptance_length_hist),
        )
