"""Results of `sample` and `verify`."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SampleOutput:
    """tokens: [B] int64. When a row asked for logprobs (batch.max_logprobs > 0):
    logprobs [B] float32 (sampled token under the processed distribution), top_ids [B, n]
    int64 and top_logprobs [B, n] float32 sorted descending, n = batch.max_logprobs; row b's
    columns past its own `logprobs` setting are padding (-1, -inf)."""

    tokens: torch.Tensor
    logprobs: torch.Tensor | None = None
    top_ids: torch.Tensor | None = None
    top_logprobs: torch.Tensor | None = None


@dataclass
class VerifyOutput:
    """tokens: [B, K+1] int64, the accepted drafts then one resampled or bonus token, padded
    with -1; num_emitted [B] int64 (= num_accepted + 1); num_accepted [B] int64. Logprobs (if
    requested) are per position: logprobs [B, K+1], top_ids/top_logprobs [B, K+1, n], all
    under the target's processed distribution at that position (-1 / -inf padding)."""

    tokens: torch.Tensor
    num_emitted: torch.Tensor
    num_accepted: torch.Tensor
    logprobs: torch.Tensor | None = None
    top_ids: torch.Tensor | None = None
    top_logprobs: torch.Tensor | None = None
