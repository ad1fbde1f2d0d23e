"""Stateless counter-based random numbers: uniform(seed, position, stream).

Every random number the sampler uses is a pure function of (request seed, absolute token
position, stream), so a seeded request's tokens depend on nothing else: not the batch size,
the row order, the neighbours or the backend. The hash is the "lowbias32" integer mixer
(Chris Wellons, "Prospecting for Hash Functions", 2018), chained over the stream salt, the two
halves of the 64-bit seed and the position. Everything is done on int64 tensors holding
values in [0, 2**32); the 32-bit products are split into 16-bit halves so no intermediate
exceeds 2**49 (a Triton kernel does the same with uint32 arithmetic, wrapping natively).

The uniform keeps the top 23 bits of the hash: u = ((h >> 9) + 0.5) * 2**-23. Every such
value is exactly representable in float32 and lies strictly inside (0, 1). (Keeping 24 bits,
((h >> 8) + 0.5) * 2**-24, is not exact in float32 above 0.5 and rounds its largest value to
1.0, so 23 bits it is.)
"""

from __future__ import annotations

import secrets
from enum import IntEnum

import torch

MASK32 = 0xFFFFFFFF


class Stream(IntEnum):
    """Independent random streams (one uniform per (seed, position, stream))."""

    SAMPLE = 0  # normal sampling and the bonus token after a fully accepted draft
    ACCEPT = 1  # acceptance uniforms of speculative verification
    RESIDUAL = 2  # resampling the residual distribution at the first rejection
    DRAFT = 3  # the draft model's own sampling (used by the engine, not by verify)


# Distinct odd 32-bit salts, one per stream (golden-ratio and xxhash primes).
STREAM_SALT = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2**32 for x in [0, 2**32) held in int64, without int64 overflow."""
    lo = x * (c & 0xFFFF)
    hi = ((x * (c >> 16)) & 0xFFFF) << 16
    return (lo + hi) & MASK32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32: x ^= x>>16; x *= 0x7feb352d; x ^= x>>15; x *= 0x846ca68b; x ^= x>>16."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash32(seed: torch.Tensor, pos: torch.Tensor, stream: int | torch.Tensor) -> torch.Tensor:
    """h = mix(mix(mix(salt ^ seed_lo) ^ seed_hi) ^ pos) as int64 in [0, 2**32).

    seed: int64 (the seed mod 2**64 in two's complement); pos: int64 absolute positions;
    stream: a Stream or an int64 tensor of stream ids (broadcast with seed and pos).
    """
    if isinstance(stream, torch.Tensor):  # no host->device copy: safe in a CUDA graph
        salt = torch.zeros_like(stream, dtype=torch.int64)
        for s, value in enumerate(STREAM_SALT):
            salt = torch.where(stream == s, value, salt)
        h = mix32(salt ^ (seed & MASK32))
    else:
        h = mix32((seed & MASK32) ^ STREAM_SALT[int(stream)])
    h = mix32(h ^ ((seed >> 32) & MASK32))
    return mix32(h ^ (pos & MASK32))


def uniform(seed: torch.Tensor, pos: torch.Tensor, stream: int | torch.Tensor) -> torch.Tensor:
    """float32 uniforms in (0, 1): ((hash >> 9) + 0.5) * 2**-23, exact in float32."""
    h = hash32(seed, pos, stream)
    return ((h >> 9).to(torch.float32) + 0.5) * (2.0**-23)


def seed_to_int64(seed: int) -> int:
    """The seed mod 2**64 as the signed int64 with the same bits (what tensors hold)."""
    s = seed % (1 << 64)
    return s - (1 << 64) if s >= 1 << 63 else s


def random_seed() -> int:
    """A fresh 64-bit seed for an unseeded request; assign it once, at admission."""
    return secrets.randbits(64)
