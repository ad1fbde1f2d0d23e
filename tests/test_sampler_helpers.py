"""Helpers (no tests here): an independent float64 reference of the sampler's semantics.

Written directly from the definitions in the sampler docstring (top-p as "mass of strictly
more probable tokens < top_p"), not from the backend's code, so the tests can catch it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy import stats

from sampler import SamplingParams

FALSE_ALARM = 1e-4  # per chi-square test


def processed_law(logits, p: SamplingParams, prompt=(), output=(), allowed=None) -> np.ndarray:
    """The processed distribution (float64 [V]) of one row; greedy rows give a one-hot."""
    x = np.asarray(logits, dtype=np.float64).copy()
    if allowed is not None:
        x[~np.asarray(allowed)] = -np.inf
    for t in set(prompt) | set(output):
        if 0 <= t < len(x):
            r = p.repetition_penalty
            x[t] = x[t] / r if x[t] > 0 else x[t] * r
    for t, c in Counter(output).items():
        if 0 <= t < len(x):
            x[t] -= p.frequency_penalty * c
            x[t] -= p.presence_penalty
    for t, b in (p.logit_bias or {}).items():
        x[t] += b
    if p.temperature == 0:
        out = np.zeros(len(x))
        out[int(np.argmax(x))] = 1.0
        return out
    x = x / p.temperature
    keep = x > -np.inf
    if p.top_k:
        keep &= x >= np.sort(x)[::-1][p.top_k - 1]
    if p.top_p < 1:
        probs = _softmax(x, keep)
        above = strictly_more_probable_mass(probs)
        keep &= above < p.top_p
    if p.min_p > 0:
        keep &= np.exp(x - x[keep].max()) >= p.min_p
    return _softmax(x, keep)


def strictly_more_probable_mass(probs: np.ndarray) -> np.ndarray:
    """For each token, the total probability of the tokens strictly more probable than it."""
    desc = np.sort(probs)[::-1]
    before = np.concatenate([[0.0], np.cumsum(desc)[:-1]])
    first = np.searchsorted(-desc, -probs, side="left")  # first index holding this value
    return before[first]


def _softmax(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    w = np.where(keep, np.exp(x - x[keep].max()), 0.0)
    return w / w.sum()


def chi_square_pvalue(tokens: np.ndarray, law: np.ndarray, min_expected: float = 5.0) -> float:
    """Goodness of fit of observed token ids to `law`; bins with expected < 5 are pooled.
    Draws on zero-probability tokens are checked separately (they must not happen)."""
    n = len(tokens)
    observed = np.bincount(tokens, minlength=len(law)).astype(np.float64)
    expected = law * n
    assert observed[law == 0].sum() == 0, "a token of probability 0 was drawn"
    big = expected >= min_expected
    obs = np.append(observed[big], observed[~big & (law > 0)].sum())
    exp = np.append(expected[big], expected[~big & (law > 0)].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    if len(exp) < 2:
        return 1.0
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)
