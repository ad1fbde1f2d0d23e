"""Adaptive speculation: how many draft tokens k_i each request gets in a step.

Model. A draft token is accepted with probability alpha, independently, until the first
rejection; the step always emits one more token from the target (the correction, or the bonus
token when all k drafts are accepted). The expected number of tokens a step emits is then

    E(k) = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)     (k + 1 if alpha = 1)

and the step costs one target pass plus k draft passes, in units of a target pass:

    C(k) = 1 + k * draft_cost_ratio.

The policy picks k in 0..cap maximising E(k) / C(k), tokens per unit of compute, the smallest k
on ties. k = 0 scores 1, so a request speculates only while alpha pays for the drafts (k = 1
beats k = 0 iff alpha > draft_cost_ratio); a higher alpha makes longer drafts worth it. The
ratio treats the request in isolation: in a batch the target pass is shared, which the engine
can reflect by lowering draft_cost_ratio at runtime.

Estimate. alpha is the mean of a Beta posterior over per-draft-token acceptance with
exponential forgetting. A step that drafted d tokens and accepted a gives a successes and, if
a < d, one failure (the rejected position; the positions after it are never judged). Counts
decay by DECAY every decode step, so the estimate follows changes in the text within about
1 / (1 - DECAY) = 20 steps. The prior Beta(PRIOR_ALPHA * PRIOR_WEIGHT, (1 - PRIOR_ALPHA) *
PRIOR_WEIGHT) is optimistic (a new request speculates at once) and weak (one step of evidence
outweighs it). The decay also explores: while a request sits at k = 0 it observes nothing, its
counts fade (by the slower IDLE_DECAY), alpha drifts back to the prior, and it probes with
k >= 1 again, so a request whose text becomes predictable later is not stuck at k = 0. With
draft_cost_ratio = 0.1 and no draft ever accepted, that is one k = 1 probe every ~8 steps,
about 1% of extra compute.

Without `adaptive`, k = cap; k_max = 0 switches speculation off. The cap is
min(k_max, the request's num_speculative_tokens, tokens left - 1): drafting past max_tokens
would be wasted.
"""

from __future__ import annotations

from dataclasses import dataclass

PRIOR_ALPHA = 0.6
PRIOR_WEIGHT = 1.0
DECAY = 0.95
IDLE_DECAY = 0.98


@dataclass(frozen=True)
class SpecSettings:
    """Runtime speculation settings (changed with Scheduler.update)."""

    k_max: int
    adaptive: bool
    draft_cost_ratio: float

    def __post_init__(self) -> None:
        if self.k_max < 0:
            raise ValueError(f"k_max must be >= 0, got {self.k_max}")
        if self.draft_cost_ratio < 0:
            raise ValueError(f"draft_cost_ratio must be >= 0, got {self.draft_cost_ratio}")


@dataclass
class AcceptanceEstimate:
    """Discounted Beta posterior over one request's per-draft-token acceptance."""

    accepted: float = 0.0
    rejected: float = 0.0

    @property
    def alpha(self) -> float:
        successes = PRIOR_ALPHA * PRIOR_WEIGHT + self.accepted
        return successes / (PRIOR_WEIGHT + self.accepted + self.rejected)

    def observe(self, drafted: int, accepted: int) -> None:
        """Record one decode step (drafted = 0 only lets the evidence fade)."""
        decay = DECAY if drafted else IDLE_DECAY
        self.accepted = decay * self.accepted + accepted
        self.rejected = decay * self.rejected + (1.0 if accepted < drafted else 0.0)


def expected_tokens(alpha: float, k: int) -> float:
    """E(k): expected tokens emitted by a step with k drafts."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def step_cost(k: int, draft_cost_ratio: float) -> float:
    """C(k): one target pass plus k draft passes, in target passes."""
    return 1.0 + k * draft_cost_ratio


def choose_k(alpha: float, cap: int, draft_cost_ratio: float) -> int:
    """The k in 0..cap maximising E(k) / C(k); the smallest such k."""
    score = lambda k: expected_tokens(alpha, k) / step_cost(k, draft_cost_ratio)
    return max(range(max(cap, 0) + 1), key=score)


def speculation_length(settings: SpecSettings, estimate: AcceptanceEstimate, cap: int) -> int:
    """k_i for one request, given its own cap (request limit, tokens left)."""
    cap = max(0, min(cap, settings.k_max))
    if not settings.adaptive:
        return cap
    return choose_k(estimate.alpha, cap, settings.draft_cost_ratio)
