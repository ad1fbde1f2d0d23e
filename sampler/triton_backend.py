"""The Triton backend: `sample` and `verify` as one fixed launch sequence of fused kernels.

Same API and results as `sampler.torch_backend` (token for token for seeded requests, up to
rounding ties: tile masses are float32 sums of the SFU's exp(x - tile max), the reference
sums expf(x - row max) directly; both take the inverse-CDF prefixes in float64; processed
logits and the weights of the tokens compared and drawn are bit-identical). Launch sequence
per call, every kernel gridded over rows (N = B * (K+1)), (rows, vocabulary tiles) or
requests:

1. `_pre_kernel` (N, [1 +] parts), with no memset before it:
   - the patch (only when some row has penalties or bias): at the ids the history, bias
     and drafts touch (never the whole vocabulary) the penalised, biased logit, written
     once by each id's owner entry (no [N, V] scratch, no phases), so a tile reads one bit
     per token; one bit set a request, shared by its K + 1 rows (drafts included: a row
     holds a later draft's logit unchanged), so that verify zeroes and sets it once;
   - for rows with top-k/top-p/min-p, the candidate threshold from a 1/16-1/8 sample of
     the row (the RANK-th largest of 64 group maxima), so that ~100-300 tokens lie above it.
2. `_tile_kernel` (B, K + 1, T): the one full read of the logits. Per tile: max, sum exp,
   argmax; for filtered rows the tokens above the row's threshold (one compare a token), with
   the tile's bound.
3. `_finish_kernel` (N): everything after the read. Merges the tiles; greedy rows take the
   argmax; unfiltered rows draw a tile by mass and the token inside it (one tile re-read);
   filtered rows resolve top-k/top-p/min-p exactly from the candidates when the bounds
   prove it, and draw among them; otherwise (flat rows) a second chance collects up to
   CMAX2 tokens in two passes over the row, and last an exact bisection. Verify rows also
   test their draft and draw the residual token.
4. verify only: `_combine_kernel` (B) chains the acceptances and picks the emitted token.

Above V = 131072 a call runs its requests as two halves (`chunk_bounds`), each this sequence:
the halves' pre kernels on high-priority streams, each half's other kernels on a stream of
its own, so that the second half's pre kernel runs beside the first half's tiles (from 128
rows a half, on a stream of its own: beside the first half's pre kernel, `pre_streams`).

No host sync, no data-dependent shapes: safe inside a CUDA graph. Host-side flags of the
batch (`any_penalty`, `max_top_k`, ...) select constexpr variants. Logprobs, when requested,
come from the torch reference processing (not fused yet).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from sampler import triton_kernels as tk
from sampler.batch import SamplingBatch
from sampler.outputs import SampleOutput, VerifyOutput
from sampler.sampling import log_probs, top_logprobs
from sampler.torch_backend import DraftProbs, process_rows

C_OVERRIDE = os.environ.get("SONICSPEC_C")  # measurement: candidate slots per tile
TILE_WARPS = os.environ.get("SONICSPEC_TILE_WARPS")  # measurement (default: BLOCK_V / 512)
FINISH_WARPS = int(os.environ.get("SONICSPEC_FINISH_WARPS", "8"))
PRE_WARPS = int(os.environ.get("SONICSPEC_PRE_WARPS", "4"))
# pval's layout (`tk._pval_at`, the kernels' HAS_PATCH): for verify up to V = 65536,
# [B, V, K + 1], a request's K + 1 values at an id in one sector (run 67, verify B = 256,
# V = 32000: the pre kernel 48 -> 37 us with every row penalised, graph replays 155 -> 143;
# issue mix 144 -> 140), else [N, V] (at V = 262144 the tile kernel's strided address spills
# at its register cap: B = 256 550 -> 619 us). SONICSPEC_PVAL_T=1 / 0 forces one.
PVAL_T = os.environ.get("SONICSPEC_PVAL_T", "auto")
PVAL_T_MAX_V = 65536


def patch_mode(vocab: int, k1: int) -> int:
    """HAS_PATCH of a call with a patch: 2 for pval as [B, V, K + 1], 1 for [N, V]."""
    if PVAL_T in ("0", "1"):
        return 2 if PVAL_T == "1" and k1 > 1 else 1
    return 2 if k1 > 1 and vocab <= PVAL_T_MAX_V else 1


# A register cap for sample's pre kernel: 80 (92 uncapped at V >= 128256 since the patch
# program issues all its lists' loads, then all its gathers; no spills at 80), about as many
# programs an SM as before that change; run 66's same-call sweep: no difference beyond
# +-2 us either way. verify's stays uncapped (40 bytes of spills at 80). 0 = no cap.
PRE_MAXNREG = int(os.environ.get("SONICSPEC_PRE_MAXNREG", "80"))
# A register cap for the tile kernel (the rule: `tile_maxnreg`; tiles of 1024 take 72 registers
# uncapped, tiles of 2048 80, with 64 bytes of spills at 48 and 24 at 56), so that more
# programs share an SM: more loads in flight (run 8's sweep: uncapped 4-5% slower; run 16:
# two tiles a program at 80 registers slower still). Runs 127-128 (H200, issue mix, graph
# replays, us): at V = 262144 72 / 64 / 56 / 48 / 40 verify B = 256 565 / 541 / 517-519 /
# 512-513 / 526, B = 64 156 / 151 / 144-145 / 142 / 147, sample B = 256 127 / 121 / 116-120 /
# 114-115 / 119; at V = 128256 56 and 48 within 1%; at V = 32000 48 loses (verify B = 256
# 129 -> 134).
# SONICSPEC_TILE_MAXNREG sets one cap for all tiles (0 = no cap).
TILE_MAXNREG = os.environ.get("SONICSPEC_TILE_MAXNREG")
FINISH_MAXNREG = int(os.environ.get("SONICSPEC_FINISH_MAXNREG", "0"))  # measurement
# A register cap for verify's finish kernel alone: 80 (128 uncapped; its stack goes from 120
# to 96 bytes) lets three programs of 8 warps share an SM instead of two, where verify's
# B (K + 1) rows outnumber two a SM (runs 29-30: B = 256, V = 128256 428 -> 419 us).
# sample's finish stays uncapped: its rows fit at two a SM up to B = 264, and the cap's
# spills lengthen every row (B = 64, V = 32000: 27 -> 29 us). 0 = no cap.
VERIFY_FINISH_MAXNREG = int(os.environ.get("SONICSPEC_VERIFY_FINISH_MAXNREG", "80"))
# The finish reads its row's settings before waiting for the tile kernel and a filtered row's
# candidate slots together with the tile stats (one round trip fewer on its critical path).
# SONICSPEC_FINISH_EARLY=0 restores the settings after the wait and the slots after the stats.
FINISH_EARLY = os.environ.get("SONICSPEC_FINISH_EARLY", "1") == "1"
CMAX = 128  # candidates per row kept for the exact filters
CMAX2 = 512  # tokens per row the second chance collects
# Measurement (bench/sampler_probe.py stamps): the finish kernel records SM clock readings at
# its stages in the last tk.STAMP_SLOTS slots of each row's second-chance scratch (slot
# tk.STAMP_COUNT: the row's candidate count before the raise), returned as _Raw.stamps.
FINISH_STAMP = False
BLOCK_Q = 8
# Positions (rows of one request) a patch program writes, and its values a history chunk
# at most ([POS, BLOCK_H]). Runs 63-64 (verify, H200): one program a request (8 positions,
# 2048 values) is slower at B <= 64 (V = 32000, B = 1: 26 -> 38 us; the program's chunks run
# one after another) and gains only at B = 256 (V = 262144: 560 -> 550); 2 positions a
# program: 27 us / 554; 1, the default: 25 / 549. Runs 198-199 (verify, K = 4, issue mix,
# same call, two repeats) again: POS 8 gains 1.6-2.3 us at B = 256 (V = 32000 127.6 ->
# 125.3-126.0, V = 262144 481-483 -> 477-480, V = 128256 equal), is mixed at B = 192 and
# slower below (B = 16, V = 32000: 22.9 -> 36.0); POS 4 and 2, and chunks of 64 or 512 ids,
# no better overall. A POS by batch size would compile another pre kernel for large batches
# (item 4: one compilation for every batch size), so it stays 1. Runs 201-202 split the patch
# by ids instead (each of a request's K + 1 programs every position of a K + 1-th of the
# history: `bench/experiments/patch-split-*.diff`): verify B = 256, V = 32000 127.2 -> 124.8 us
# (penalties mix 119.5 -> 107.3), but B = 1 17.7 -> 19.3; compiled beside the patch by rows
# and chosen at run time, the pre kernel (128 registers instead of 80) lost at every B
# (B = 256 127.7 -> 132.9). Neither kept. (Measurement knobs.)
PATCH_POS = int(os.environ.get("SONICSPEC_PATCH_POS", "1"))
PATCH_VALUES = int(os.environ.get("SONICSPEC_PATCH_VALUES", "1024"))
# No multiply-add contraction: `x - f * count` must round twice, as torch computes it.
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
OPTS: dict[str, bool] = ({} if INTERPRET
                         else {"enable_fp_fusion": os.environ.get("SONICSPEC_FAST_MATH") == "1"})


# Programmatic dependent launch for every kernel of the sequence: each launches while its
# predecessor drains, and waits for it in `_after_prior` before its first load.
# SONICSPEC_PDL=0 turns it off (measurement).
PDL = not INTERPRET and os.environ.get("SONICSPEC_PDL", "1") == "1"
# Measurement: kernels (comma-separated names) launched without it, the rest with it.
PDL_OFF = set(filter(None, os.environ.get("SONICSPEC_PDL_OFF", "").split(",")))


def kernel_options(kernel: str, verify: bool = False, block: int = 2048,
                   vocab: int = 1 << 30) -> dict[str, Any]:
    """Compile options of a kernel's launches (for `verify`'s where they differ; the tile
    kernel's for vocabulary tiles of `block` in rows of `vocab`)."""
    opts: dict[str, Any] = dict(OPTS)
    if PDL and kernel not in PDL_OFF:
        opts["launch_pdl"] = True
    opts["num_warps"] = {"_tile_kernel": tile_warps(block), "_finish_kernel": FINISH_WARPS,
                         "_pre_kernel": PRE_WARPS}.get(kernel, 4)
    cap = 0  # registers a thread (0: none)
    if kernel == "_tile_kernel":
        cap = tile_maxnreg(block, vocab)
    elif kernel == "_pre_kernel" and not verify:
        cap = PRE_MAXNREG
    elif kernel == "_finish_kernel":
        cap = VERIFY_FINISH_MAXNREG if verify else FINISH_MAXNREG
    if cap and not INTERPRET:
        opts["maxnreg"] = cap
    return opts


def block_v(vocab: int) -> int:
    """Vocabulary tile: on GPU 1024 up to V = 131072 (at most 128 tiles a row, C = 16 slots
    each), 2048 beyond; small under the interpreter so tests cross tiles.

    Run 37 (H200, sample / verify us against 2048): at V = 128256 B = 256 94 -> 91 / 418 ->
    403, B = 64 39 -> 38 / 121 -> 117; V = 32000 B = 256 46 -> 45 / 176 -> 170; B = 1-16
    within 1 us. At V = 262144, 256 tiles a row need C = 16 (C = 8 overflows: the rows'
    second chance, ~1 ms) and then the row stage merges 4096 slots: B = 1 22 -> 23 / 33 ->
    37, so 2048 stays there."""
    env = os.environ.get("SONICSPEC_BLOCK_V")
    if env:
        return int(env)
    if INTERPRET:
        return 256 if vocab > 256 else 64
    return 1024 if vocab <= 131072 else 2048


TILE_SCAN_MAX_V = 65536
TILE_SCAN = os.environ.get("SONICSPEC_TILE_SCAN")  # measurement: 0 / 1 / 2 forces one


def tile_scan(vocab: int) -> int:
    """How a tile with two candidates in one 32-token row stores them (`_tile_kernel`'s SCAN):
    1 and 2 store all of them by a scan, in id order, so the row stage skips its id sort; 0
    takes the rows' maxima by popcount and the rest from an atomic counter, in no order.
    1 runs the scan inline, 2 in a function that is not inlined (`_scan_store`, which
    processes the tile again from L2 in the rare tiles that need it) so that the hot path
    keeps its registers under the tile kernel's register cap (`tile_maxnreg`). Same-call A/B,
    H200, issue mix, sample / verify us: inline against the counter (runs 73, 75) V = 32000
    B = 1 18 -> 16 / 22 -> 20, B = 64 24 -> 22 / 47 -> 45, B = 256 37 -> 36 / 140 -> 138, but
    V = 128256 B = 256 74 -> 76 / 316 -> 324 and V = 262144 B = 256 123 -> 131 / 547 -> 586
    (spills); the function (runs 77, 78, 82) at V = 262144 (tiles of 2048) B = 64 verify
    152 -> 149, B = 256 550 -> 538, but at V = 128256 (tiles of 1024) against the counter
    B = 1 18 -> 19 / 23 -> 24, B = 256 72 -> 74 / 307 -> 306, and at V = 32000 it loses to
    inline (verify B = 64 45 -> 51). Since `_scan_store` reprocesses its tile by 32-token rows
    (run 138) and the slots are int64 pairs, it beats the counter at V = 128256 too (run 139,
    graph replays, two repeats: sample B = 1 -4.5%, B = 256 72 -> 70 us, verify B = 64
    88 -> 85, B = 256 296 -> 288). So 1 up to TILE_SCAN_MAX_V (the bound of `patch_mode`'s
    layout too), 2 above; 0 is kept for measurement. SONICSPEC_TILE_SCAN=0 / 1 / 2 forces."""
    if TILE_SCAN:
        return int(TILE_SCAN)
    return 1 if vocab <= TILE_SCAN_MAX_V else 2


def tile_warps(block: int) -> int:
    """The tile kernel's warps: 16 tokens a thread (4 warps for tiles of 2048, 2 for 1024).
    Run 37: tiles of 1024 on 4 warps (8 tokens a thread) gain at B <= 16 (V = 32000 sample
    B = 1 21 -> 17 us) and lose at B >= 64 (V = 128256 verify B = 256 403 -> 489)."""
    return int(TILE_WARPS) if TILE_WARPS else max(1, block // 512)


TILE_TRIGGER_LAST = os.environ.get("SONICSPEC_TILE_TRIGGER_LAST")  # measurement


def tile_trigger_last(block: int) -> int:
    """How many of the tile grid's last programs let the finish kernel launch early
    (`_tile_kernel`'s TRIGGER_LAST; 0: every program): 4096 (above a wave of resident
    programs) for tiles of 1024, every program for 2048. The instruction costs a grid of
    2-warp programs ~20% of its read when it runs without the features (run 174, H200, graph
    replays, temperature mix, every program -> last 4096: verify B = 256, V = 128256
    214.5 -> 179.9 us, V = 32000 66.6 -> 59.5; sample B = 256, V = 128256 49.3 -> 44.7); the
    issue's mix is unchanged at V <= 128256 (288 / 289 us), and at tiles of 2048 it lost
    (run 171: verify B = 256, V = 262144 482 -> 488). SONICSPEC_TILE_TRIGGER_LAST forces."""
    if TILE_TRIGGER_LAST is not None:
        return int(TILE_TRIGGER_LAST)
    return 4096 if block <= 1024 else 0


def tile_maxnreg(block: int, vocab: int = 1 << 30) -> int:
    """The tile kernel's register cap for vocabulary tiles of `block` in rows of `vocab`
    (0: none): 48 for tiles of 2048; for tiles of 1024, 64 where the tile kernel ranks a
    crowded tile's candidates inline (`tile_scan` 1: V <= TILE_SCAN_MAX_V), 56 otherwise.
    Run 180 (H200, issue mix, same call, two repeats, us, 64 / 56): V = 32000 verify B = 16
    23.2-23.3 / 24.2-24.3, B = 64 40.6-40.8 / 41.4-41.5, B = 256 127.2-127.5 / 128.1-128.3,
    sample B = 16 16.2-16.4 / 16.6-16.8, B = 64 20.0 / 20.6; at V = 128256 64 loses at
    B >= 64 (verify B = 256 294.3 / 289.1-289.8), and 72 / 80 lose at B = 256 at either V."""
    if TILE_MAXNREG is not None:
        return int(TILE_MAXNREG)
    if block >= 2048:
        return 48
    return 64 if tile_scan(vocab) == 1 else 56


def slots(tiles: int) -> int:
    """Candidate slots per tile, C: 64 for rows of up to 16 tiles, 32 up to 64, 16 beyond.
    Some 150-300 tokens of a row lie above its threshold (`sample_plan`), ~5-10 a tile at
    V = 32000 (32 tiles of 1024) but twice that where a grammar allows half the vocabulary
    (the tokens above crowd into the allowed tiles): C is ~4x the even share so that a tile
    overflows (and its row takes the slow path) with probability < 1e-6. The row stage
    merges T * C slots: 2048 up to 128 tiles (V = 262144 in tiles of 2048), 4096 beyond
    (C = 8 there overflows: run 37). SONICSPEC_C overrides (measurement)."""
    if C_OVERRIDE:
        return int(C_OVERRIDE)
    return 64 if tiles <= 16 else 32 if tiles <= 64 else 16


def sample(logits: torch.Tensor, batch: SamplingBatch) -> SampleOutput:
    """logits: [B, V] float32/bf16/fp16 (not changed) -> tokens [B] int64. No host sync."""
    bsz = logits.shape[0]
    drafts = torch.empty(bsz, 0, dtype=torch.int64, device=logits.device)
    out = _run(logits.unsqueeze(1), drafts, batch, None, None)
    tokens = out.tokens[:, 0]
    if batch.max_logprobs == 0:  # (batch-wide, as in every slice of the batch)
        return SampleOutput(tokens=tokens)
    rows, proc = process_rows(logits, batch)
    lp = top_logprobs(log_probs(proc.filtered), tokens, rows.num_logprobs, rows.max_logprobs)
    return SampleOutput(tokens, *lp)


def verify(logits: torch.Tensor, draft_tokens: torch.Tensor, batch: SamplingBatch,
           draft_probs: DraftProbs = None, num_draft: torch.Tensor | None = None) -> VerifyOutput:
    """logits: [B, K+1, V]; draft_tokens: [B, K]; draft_probs None / dense [B, K, V] / sparse
    (ids [B, K, M], probs [B, K, M]); num_draft [B] (default K). No host sync."""
    out = _run(logits, draft_tokens, batch, draft_probs, num_draft)
    n_acc, n_emit = out.num_accepted, out.num_emitted
    if n_acc is None:  # K = 0
        n_acc = torch.zeros(logits.shape[0], dtype=torch.int64, device=logits.device)
        n_emit = n_acc + 1
    assert n_emit is not None  # (set with num_accepted by the combine kernel)
    if batch.max_logprobs == 0:
        return VerifyOutput(out.tokens, n_emit, n_acc)
    bsz, k1, vocab = logits.shape
    rows, proc = process_rows(logits, batch, draft_tokens.long(), out.num_draft)
    lp = top_logprobs(log_probs(proc.filtered.view(bsz, k1, vocab)), out.tokens,
                      rows.num_logprobs.view(bsz, k1), batch.max_logprobs)
    return VerifyOutput(out.tokens, n_emit, n_acc, *lp)


class _Raw:
    def __init__(self, tokens: torch.Tensor, num_accepted: torch.Tensor | None,
                 num_draft: torch.Tensor | None, path: torch.Tensor,
                 stamps: torch.Tensor | None = None,
                 num_emitted: torch.Tensor | None = None) -> None:
        self.tokens, self.num_accepted, self.num_draft = tokens, num_accepted, num_draft
        self.num_emitted = num_emitted
        self.path = path  # per row: 0 greedy, 1 candidates, 2 tiles, 3 slow (diagnostics)
        self.stamps = stamps  # FINISH_STAMP: per row, the finish kernel's clock readings


def _run(logits: torch.Tensor, drafts: torch.Tensor, batch: SamplingBatch,
         draft_probs: DraftProbs, num_draft: torch.Tensor | None) -> _Raw:
    bsz, k1, vocab = logits.shape
    k = k1 - 1
    dev = logits.device
    logits = logits.contiguous()
    drafts = drafts.to(device=dev, dtype=torch.int64).contiguous()
    # No default num_draft tensor (a fill kernel per call): the kernels use K without one.
    n_draft = (drafts if num_draft is None
               else num_draft.to(device=dev, dtype=torch.int64).contiguous())
    head = batch.head(bsz)
    gm = head.grammar_bitmask
    if gm is not None and gm.shape[1] < k1:
        raise ValueError(f"batch has bitmasks for {gm.shape[1]} positions, verify needs "
                         f"K+1 = {k1} (build it with num_positions={k1})")
    # (the draft law's conversions before the first launch: a call whose draft law fails
    # them launches nothing)
    q_mode, q, qid, q_len = _draft_probs(draft_probs, drafts, dev)
    call = _Call(logits, drafts, n_draft, num_draft is not None, head, q_mode, q, qid, q_len)
    bounds = [(0, bsz)] if FINISH_STAMP else chunk_bounds(bsz, vocab)
    # every chunk's buffers before the first launch, on this stream (`_Chunk`)
    chunks = [_Chunk(call, lo, hi) for lo, hi in bounds]
    if len(chunks) > 1 and dev.type == "cuda":
        _launch_on_streams(chunks, dev)
    else:
        for c in chunks:
            c.pre()
            c.rest()
    stamps = chunks[0].stamps() if FINISH_STAMP else None
    if k == 0:
        return _Raw(call.out[:, None], None, None, call.path, stamps)
    return _Raw(call.out, call.n_acc, n_draft if call.has_nd else None, call.path, stamps,
                call.n_emit)


# Chunks of requests: each chunk its own launch sequence, the pre kernels one after another
# on a high-priority stream and each chunk's tile, finish and combine kernels on a stream of
# their own once its pre kernel is done. A chunk's pre kernel then runs beside the tile kernel
# of the chunk before it (whose programs it overtakes as they end, by its priority), instead
# of every tile waiting for the whole batch's pre kernel (run 120: ~7% of verify at B = 256,
# V = 262144, all of it on the critical path), and the finish of every chunk but the last
# runs beside a later chunk's tiles. Runs 147-149 (H200, issue mix, graph replays): two
# halves at V = 262144 verify B = 256 493-503 -> 488-491 us, sample B = 64 40.5-40.9 ->
# 39.5-40.1, verify B = 64 137.5-138.1 -> 136.4-136.9; three or more chunks, uneven halves
# and the pre kernels at the lanes' priority are slower (sample B = 256, V = 32000 34 -> 38
# at the lanes' priority), the first pre kernel on its chunk's lane (its tile kernel reading
# early, as in one sequence) no faster; at V <= 128256 halves gain nothing (V = 32000 verify
# B = 256 129 -> 130). So by default two halves where V > CHUNK_MIN_V and each half
# holds CHUNK_ALIGN requests at least. SONICSPEC_CHUNKS (measurement): requests a chunk,
# e.g. "32,64" for 32 and then 64 at a time; "0": one chunk. Chunks start at multiples of
# CHUNK_ALIGN, so that every slice's pointers keep the whole batch's 16-byte alignment (the
# kernels' specialisations, and so their compilations, stay the same).
CHUNKS = os.environ.get("SONICSPEC_CHUNKS")
CHUNK_MIN_V = 131072
CHUNK_ALIGN = 1 if INTERPRET else 16
CHUNK_PRIORITY = int(os.environ.get("SONICSPEC_CHUNK_PRIORITY", "-8"))  # (measurement)
# SONICSPEC_CHUNK_LANE_PRIORITY=1 (measurement): the lanes of every chunk but the last at a
# priority between the pre kernels' and the last lane's, so that an earlier chunk's finish
# kernel goes before the later chunk's tile programs that wait for an SM. Slower (run 152,
# same call, two repeats: V = 262144 verify B = 256 487 -> 494 us, sample B = 64 40 -> 42),
# so every lane runs at the default priority.
CHUNK_LANE_PRIORITY = os.environ.get("SONICSPEC_CHUNK_LANE_PRIORITY", "0") == "1"
# (measurement) the finish kernel's warps in calls that run in chunks (0: FINISH_WARPS). Run
# 153 (V = 262144, same call, three repeats): 4 warps verify B = 256 489.5-489.8 ->
# 484.5-485.1 us, sample B = 64 39.6-39.8 -> 39.9-40.1, verify B = 64 and sample B = 256
# within 0.5. Not the default: chunked calls (B >= 32) would compile another finish than
# smaller batches, and one compilation serves every batch size; all calls on 4 warps lose
# B = 1 (run 116: verify V = 262144 25 -> 33 us).
CHUNK_FINISH_WARPS = int(os.environ.get("SONICSPEC_CHUNK_FINISH_WARPS", "0"))
# Where a chunk holds CHUNK_PRE_STREAMS_MIN_ROWS rows (B (K + 1)) or more, each chunk's pre
# kernel goes on a high-priority stream of its own, forked from the caller's: a later chunk's
# pre kernel then waits for the logits' writer only, not for the earlier chunk's pre kernel
# (they share no data), and runs beside it rather than after it. Run 156 (H200, issue mix,
# V = 262144, same call, three repeats, us): verify B = 64 (160 rows a chunk) 136.1-136.6 ->
# 132.7-132.9, B = 256 (640) 487.1-487.6 -> 482.7-483.6, sample B = 256 (128) 112.1-112.6 ->
# 109.2-109.9, but sample B = 64 (32 rows a chunk) 39.9-40.0 -> 41.2-41.5: there the first
# pre kernel, sharing the GPU with the second, ends later (6.2 -> 8.5 us) and so does its
# tile kernel's read. SONICSPEC_CHUNK_PRE_STREAMS=1 / 0 (measurement) forces one.
CHUNK_PRE_STREAMS = os.environ.get("SONICSPEC_CHUNK_PRE_STREAMS", "auto")
CHUNK_PRE_STREAMS_MIN_ROWS = 128


def pre_streams(rows: int) -> bool:
    """Whether a call in chunks of `rows` rows (its first chunk's) gives each chunk's pre
    kernel a stream of its own (`CHUNK_PRE_STREAMS`)."""
    if CHUNK_PRE_STREAMS in ("0", "1"):
        return CHUNK_PRE_STREAMS == "1"
    return rows >= CHUNK_PRE_STREAMS_MIN_ROWS


def chunk_bounds(bsz: int, vocab: int) -> list[tuple[int, int]]:
    """Request ranges [lo, hi) of a call's chunks, in order (`CHUNKS`)."""
    if CHUNKS is None:  # the default: halves for large vocabularies
        half = bsz // 2 - bsz // 2 % CHUNK_ALIGN
        if vocab > CHUNK_MIN_V and half >= CHUNK_ALIGN:
            return [(0, half), (half, bsz)]
        return [(0, bsz)]
    spec = [int(v) for v in CHUNKS.split(",") if v.strip()]
    if not spec or spec[0] <= 0:
        return [(0, bsz)]
    bounds: list[tuple[int, int]] = []
    lo = 0
    while lo < bsz:
        size = spec[min(len(bounds), len(spec) - 1)]
        size = max(CHUNK_ALIGN, size - size % CHUNK_ALIGN)
        bounds.append((lo, min(bsz, lo + size)))
        lo = bounds[-1][1]
    return bounds


_STREAMS: dict[tuple[torch.device, int, bool], torch.cuda.Stream] = {}


def _stream(dev: torch.device, index: int, priority: int) -> torch.cuda.Stream:
    """The device's stream for a role (index -1 - i: chunk i's pre kernel, all of them on -1
    unless `pre_streams`; index i >= 0: chunk i's lane) at a priority, made once."""
    key = (dev, index, priority != 0)
    if key not in _STREAMS:
        _STREAMS[key] = torch.cuda.Stream(dev, priority=priority)
    return _STREAMS[key]


def _launch_on_streams(chunks: list[_Chunk], dev: torch.device) -> None:
    """The chunks' pre kernels on the device's highest-priority streams (their pending
    programs go first as the tile kernels' programs end): one after another on one stream,
    or each on its own (`pre_streams`); each chunk's other kernels on a stream of its own
    after its pre kernel (`CHUNK_LANE_PRIORITY`); the caller's stream waits for all of them.
    Stream forks and joins only: no host sync, and capturable in a CUDA graph."""
    last = len(chunks) - 1
    own = pre_streams(chunks[0].logits.shape[0] * chunks[0].k1)
    forks = [_stream(dev, -1 - i, CHUNK_PRIORITY) for i in range(len(chunks) if own else 1)]
    highs = forks if own else forks * len(chunks)  # (chunk i's pre kernel's stream)
    lanes = [_stream(dev, i, -1 if CHUNK_LANE_PRIORITY and i < last else 0)
             for i in range(len(chunks))]
    caller = torch.cuda.current_stream(dev)
    for high in forks:
        high.wait_stream(caller)
    for c, high, lane in zip(chunks, highs, lanes):
        with torch.cuda.stream(high):
            c.pre()
        lane.wait_stream(high)
        with torch.cuda.stream(lane):
            c.rest()
    for lane in lanes:
        caller.wait_stream(lane)
    for high in forks:
        caller.wait_stream(high)


class _Call:
    """A call's inputs and outputs, shared by its chunks."""

    def __init__(self, logits: torch.Tensor, drafts: torch.Tensor, n_draft: torch.Tensor,
                 has_nd: bool, head: SamplingBatch, q_mode: int, q: torch.Tensor,
                 qid: torch.Tensor, q_len: int) -> None:
        self.logits, self.drafts, self.n_draft, self.has_nd = logits, drafts, n_draft, has_nd
        self.head, self.q_mode, self.q, self.qid, self.q_len = head, q_mode, q, qid, q_len
        bsz, k1, _ = logits.shape
        dev = logits.device
        self.path = torch.empty(bsz * k1, dtype=torch.int32, device=dev)
        i64: dict[str, Any] = dict(dtype=torch.int64, device=dev)
        self.out = torch.empty((bsz, k1) if k1 > 1 else (bsz,), **i64)
        self.n_acc = torch.empty(bsz, **i64) if k1 > 1 else None
        self.n_emit = torch.empty(bsz, **i64) if k1 > 1 else None
        self._tick: torch.Tensor | None = None

    def tickets(self) -> torch.Tensor:
        """The threshold tickets of every row of the call (`_tickets`), taken once."""
        if self._tick is None:
            self._tick = _tickets(self.logits.shape[0] * self.logits.shape[1],
                                  self.logits.device)
        return self._tick


class _Chunk:
    """Requests [lo, hi) of a call: their buffers, all allocated at construction on the
    caller's stream (a block freed after the call goes back to that stream, whose later work
    comes after every chunk's) and kept until the call returns (the later kernels of a
    sequence start before the earlier ones end: `tk._after_prior`), and their two launch
    steps, `pre` (the pre kernel) and `rest` (tile, finish and for verify combine), which
    write the call's outputs at these requests."""

    def __init__(self, call: _Call, lo: int, hi: int) -> None:
        head = call.head.rows(lo, hi)
        bsz, k1, vocab = hi - lo, call.logits.shape[1], call.logits.shape[2]
        dev = call.logits.device
        self.call, self.head, self.k1, self.vocab = call, head, k1, vocab
        self.chunked = bsz < call.logits.shape[0]
        self.logits = call.logits[lo:hi]
        self.drafts, self.n_draft = call.drafts[lo:hi], call.n_draft[lo:hi]
        self.q = call.q[lo:hi] if call.q_mode else call.q
        self.qid = call.qid[lo:hi]
        n = bsz * k1
        r0, r1 = lo * k1, hi * k1
        self.path, self.out = call.path[r0:r1], call.out[lo:hi]
        if k1 > 1:
            assert call.n_acc is not None and call.n_emit is not None
            self.n_acc, self.n_emit = call.n_acc[lo:hi], call.n_emit[lo:hi]
        bv = block_v(vocab)
        tiles = -(-vocab // bv)
        t_pad = tk.next_pow2(tiles)
        words = (vocab + 31) // 32
        f32: dict[str, Any] = dict(dtype=torch.float32, device=dev)
        i32: dict[str, Any] = dict(dtype=torch.int32, device=dev)
        self.has_patch = patch_mode(vocab, k1) if head.any_penalty or head.any_bias else 0
        self.has_filter = head.max_top_k > 0 or head.any_top_p or head.any_min_p
        # No memset: the patch programs zero their requests' bits, a tile zeroes its slot
        # counter when it needs it, and the threshold tickets live in a buffer that outlives
        # the call.
        self.bits = torch.empty(bsz * words if self.has_patch else 1, **i32)
        self.thr = torch.empty(n if self.has_filter else 1, **f32)
        self.gmax = torch.empty(n, 64, **f32) if self.has_filter else None
        self.pval = (torch.empty(n, vocab, **f32) if self.has_patch
                     else torch.empty(1, **f32))
        self.tick = None
        if self.has_filter and thr_parts(n, sample_plan(vocab)["GB"]) > 1:
            self.tick = call.tickets()[r0:r1]
        self.tmax = torch.empty(n, t_pad, **f32)
        self.tsum = torch.empty(n, t_pad, **f32)
        self.targ = torch.empty(n, t_pad, **i32)
        c = slots(tiles)
        if self.has_filter:
            self.tcnt = torch.empty(n, t_pad, **i32)
            self.tbnd = torch.empty(n, t_pad, **f32)
            self.cpair = torch.empty(n, t_pad, c, dtype=torch.int64,
                                     device=dev)  # (`triton_kernels._pair`)
            self.sv = torch.empty(n, CMAX, dtype=torch.int64, device=dev)
            self.sv2 = torch.empty(n, CMAX2, dtype=torch.int64, device=dev)
        else:
            self.tcnt, self.tbnd = self.targ, self.tmax
            self.cpair = self.sv = self.sv2 = torch.empty(1, dtype=torch.int64,
                                                          device=dev)  # (unread)
        if k1 > 1:
            self.acc, self.toks, self.tokr = (torch.empty(n, **i32) for _ in range(3))
        else:
            self.acc = self.toks = self.tokr = self.path
        self.bv, self.tiles, self.t_pad, self.words, self.c = bv, tiles, t_pad, words, c

    def pre(self) -> None:
        """The pre kernel: the patch and the thresholds."""
        self.pval = _pre(self.logits, self.drafts, self.n_draft if self.call.has_nd else None,
                         self.head, self.bits, self.has_patch, self.tick,
                         self.thr if self.has_filter else None, self.gmax, self.pval)

    def rest(self) -> None:
        """The tile, finish and (verify) combine kernels."""
        call, head, k1, vocab = self.call, self.head, self.k1, self.vocab
        k = k1 - 1
        bsz = self.logits.shape[0]
        gm = head.grammar_bitmask
        if gm is not None:
            gmask, g_sb, g_sj = gm, gm.stride(0), gm.stride(1)
        else:
            gmask, g_sb, g_sj = head.has_grammar, 0, 0
        common = dict(HAS_GRAMMAR=gm is not None, HAS_PATCH=self.has_patch)
        logits, stride = self.logits, self.logits.stride(1)
        tk._tile_kernel[(bsz, k1, self.tiles)](
            logits, stride, vocab, k1, head.temperature, head.row_flags, gmask, g_sb, g_sj,
            self.bits, self.pval, self.words, self.thr, self.tmax, self.tsum, self.targ,
            self.tcnt, self.tbnd, self.cpair, T_PAD=self.t_pad, C=self.c, BLOCK_V=self.bv,
            HAS_CAND=self.has_filter, SCAN=tile_scan(vocab),
            TRIGGER_LAST=tile_trigger_last(self.bv), **common,
            **kernel_options("_tile_kernel", block=self.bv, vocab=vocab))
        verifying = k > 0
        finish_opts = kernel_options("_finish_kernel", verifying)
        if self.chunked and CHUNK_FINISH_WARPS:
            finish_opts["num_warps"] = CHUNK_FINISH_WARPS
        tk._finish_kernel[(bsz * k1,)](
            logits, stride, vocab, k, k1, self.tiles, head.temperature, gmask, g_sb, g_sj,
            head.has_grammar, self.bits, self.pval, self.words, head.top_k, head.top_p,
            head.min_p, head.seed, head.position, self.drafts, self.n_draft, self.q, self.qid,
            call.q_len, self.tmax, self.tsum, self.targ, self.tcnt, self.tbnd, self.cpair,
            self.sv, self.sv2, self.out, self.acc, self.toks, self.tokr, self.path,
            T_PAD=self.t_pad, C=self.c, CMAX=CMAX, CMAX2=CMAX2, BLOCK_V=self.bv,
            HAS_FILTER=self.has_filter, VERIFY=verifying, Q_MODE=call.q_mode, BLOCK_Q=BLOCK_Q,
            HAS_ND=call.has_nd, EARLY=FINISH_EARLY, **common, **finish_opts,
            **({"STAMP": True} if FINISH_STAMP else {}))
        if verifying:
            tk._combine_kernel[(bsz,)](self.drafts, self.n_draft, self.acc, self.toks,
                                       self.tokr, self.out, self.n_acc, self.n_emit, k, k1,
                                       K1_PAD=tk.next_pow2(k1), HAS_ND=call.has_nd,
                                       **kernel_options("_combine_kernel"))

    def stamps(self) -> torch.Tensor | None:
        """FINISH_STAMP's clock readings per row (filtered batches)."""
        return self.sv2[:, CMAX2 - tk.STAMP_SLOTS.value:] if self.has_filter else None


_TICKETS: dict[torch.device, list[torch.Tensor]] = {}


def _tickets(rows: int, dev: torch.device) -> torch.Tensor:
    """The threshold parts' atomic tickets, [rows] int32, zero at every call: a buffer per
    device that outlives the calls (each call's last part zeroes its row's ticket again),
    so no memset precedes the launch. Calls on one device run in stream order (as the
    engine and CUDA-graph replays do); a buffer first needed during a capture is made for
    that call alone (zeroed inside the graph), never kept. A larger batch takes a larger
    buffer; the smaller ones stay allocated, since graphs captured earlier still use them
    (freed, their memory would go to other tensors under the graphs' replays)."""
    kept = _TICKETS.setdefault(dev, [])
    if kept and kept[-1].numel() >= rows:
        return kept[-1]
    buf = torch.zeros(max(rows, 1024), dtype=torch.int32, device=dev)
    if dev.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        kept.append(buf)
    return buf


def patch(logits: torch.Tensor, drafts: torch.Tensor, num_draft: torch.Tensor | None,
          head: SamplingBatch, bits: torch.Tensor) -> torch.Tensor:
    """The patch alone (`_pre_kernel` without the thresholds): sets in `bits` ([B, ceil(V/32)]
    int32, one set a request shared by its K + 1 rows; the kernel zeroes it) the ids each
    request's history, bias and drafts (when some request has penalties) touch and returns
    pval [N, V] float32 holding each row's penalised, biased logits there (a draft at or
    after the row's position: its unchanged logit; elsewhere unwritten; the kernels may keep
    it as [B, V, K + 1]: `patch_mode`).
    logits [B, K+1, V] contiguous, drafts [B, K] int64."""
    bsz, k1, vocab = logits.shape
    mode = patch_mode(vocab, k1)
    pval = _pre(logits, drafts, num_draft, head, bits, mode, None, None)
    if mode == 2:  # [B, V, K + 1] -> [N, V]
        pval = pval.view(bsz, vocab, k1).transpose(1, 2).reshape(bsz * k1, vocab)
    return pval


# Samples of up to THR_ONE_STEP_TOKENS (V <= 4096 and 8192 < V <= 32768) in one step of one
# program a row, the group maxima in registers (`_thr_part`): no store, ticket and reload
# of them, the round trips on a small batch's critical path (run 89, PDL-off, V = 32000:
# sample B = 64 4.4 -> 3.1 us, verify 7.8 -> 6.6). SONICSPEC_THR_ONE_STEP=0 (measurement)
# restores the parts; SONICSPEC_THR_ONE_STEP_TOKENS another bound (run 90: at 8192 sample's
# capped pre kernel spills, V = 128256 B = 1 3.0 -> 3.8 us).
THR_ONE_STEP = os.environ.get("SONICSPEC_THR_ONE_STEP", "1") == "1"
THR_ONE_STEP_TOKENS = int(os.environ.get("SONICSPEC_THR_ONE_STEP_TOKENS", "4096"))


def sample_plan(vocab: int) -> dict[str, int]:
    """How `_thr_part` samples a row: every STRIDE-th run of 32 tokens (all of them up to
    V = 8192; 1/8 of the row up to 65536; 1/16 beyond), in 64 groups of G_RUNS runs, GB
    groups (~2048 tokens) a step (all 64 in one step up to THR_ONE_STEP_TOKENS), threshold =
    the RANK-th largest group max. Chosen so that about 150-300 tokens of a peaked row lie
    above the threshold: enough for top-k 50 with margin (the top 50 put RANK or more tokens
    in a 1/STRIDE sample with probability < 1e-5), few enough that a tile's C slots almost
    never overflow."""
    stride = 1 if vocab <= 8192 else 8 if vocab <= 65536 else 16
    runs = -(-vocab // (32 * stride))
    g_runs = tk.next_pow2(-(-runs // 64))
    gb = min(64, max(1, 2048 // (g_runs * 32)))
    if THR_ONE_STEP and 64 * g_runs * 32 <= THR_ONE_STEP_TOKENS:
        gb = 64  # one program a row, one step (`_thr_part`)
    return dict(STRIDE=stride, G_RUNS=g_runs, GB=gb, RANK=12 if stride == 16 else 16)


def thr_parts(rows: int, gb: int) -> int:
    """Programs per row for the thresholds: up to 64 / GB (one step each) while the whole
    grid stays within ~1024 programs (small batches: short latency), else one per row (a
    loop of steps, no ticket: large batches fill the GPU with rows)."""
    parts = max(1, min(64 // gb, 1024 // max(rows, 1)))
    return 1 << (parts.bit_length() - 1)


def _pre(logits: torch.Tensor, drafts: torch.Tensor, num_draft: torch.Tensor | None,
         head: SamplingBatch, bits: torch.Tensor, has_patch: int, tick: torch.Tensor | None,
         thr: torch.Tensor | None, gmax: torch.Tensor | None = None,
         pval: torch.Tensor | None = None) -> torch.Tensor:
    """`_pre_kernel`: the patch (when has_patch, pval's layout: `patch_mode`; see `patch`)
    and, when `thr` ([N] float32) is given, each filtered row's candidate threshold in it.
    Rows split over several programs meet through tickets: `tick` ([N] int32, zero; zero
    again after the call), by default the device's shared buffer (`_tickets`), taken only
    then; their group maxima through `gmax` ([N, 64] float32 scratch; by default one made
    here); the patch's values in `pval` (by default one made here). Returns pval."""
    bsz, k1, vocab = logits.shape
    k = k1 - 1
    dev = logits.device
    n = bsz * k1
    if pval is None:
        pval = (torch.empty(n, vocab, dtype=torch.float32, device=dev) if has_patch
                else torch.empty(1, dtype=torch.float32, device=dev))
    has_thr = thr is not None
    if not has_patch and not has_thr:
        return pval
    hist_ids, hist_counts = head.hist_ids.contiguous(), head.hist_counts.contiguous()
    bias_ids, bias_values = head.bias_ids.contiguous(), head.bias_values.contiguous()
    pos = min(PATCH_POS, tk.next_pow2(k1))
    block_h = min(512, tk.next_pow2(hist_ids.shape[1]), max(16, PATCH_VALUES // pos))
    block_b = min(64, tk.next_pow2(bias_ids.shape[1]))
    gm = head.grammar_bitmask
    gmask, g_sb, g_sj = (head.has_grammar, 0, 0) if gm is None else (gm, gm.stride(0),
                                                                      gm.stride(1))
    plan = sample_plan(vocab)
    if gmax is None:
        gmax = torch.empty(n, 64, dtype=torch.float32, device=dev) if has_thr else pval
    parts = thr_parts(n, plan["GB"])
    if has_thr and parts > 1 and tick is None:
        tick = _tickets(n, dev)
    tk._pre_kernel[(n, (1 if has_patch else 0) + (parts if has_thr else 0))](
        logits, logits.stride(1), hist_ids, hist_counts, hist_ids.shape[1], bias_ids,
        bias_values, bias_ids.shape[1], drafts, drafts if num_draft is None else num_draft, k,
        k1, head.repetition_penalty, head.frequency_penalty, head.presence_penalty, bits, pval,
        vocab, (vocab + 31) // 32, head.temperature, gmask, g_sb, g_sj, head.has_grammar,
        head.top_k, head.top_p, head.min_p, gmax, bits if tick is None else tick,
        pval if thr is None else thr, parts,
        HAS_HIST=has_patch and head.any_penalty, HAS_BIAS=has_patch and head.any_bias,
        HAS_EXTRA=has_patch and k > 0 and head.any_penalty, HAS_ND=num_draft is not None,
        BLOCK_H=block_h, BLOCK_K=tk.next_pow2(k), POS=pos,
        BIAS_CHUNK=min(block_b, max(1, 8192 // block_h)), HAS_PATCH=has_patch,
        HAS_THR=has_thr, HAS_GRAMMAR=gm is not None, **plan,
        **kernel_options("_pre_kernel", k > 0))
    return pval


def _draft_probs(draft_probs: DraftProbs, drafts: torch.Tensor, dev: torch.device,
                 ) -> tuple[int, torch.Tensor, torch.Tensor, int]:
    """(mode, probs, ids, length): 0 none, 1 dense [B, K, V], 2 sparse [B, K, M]."""
    if draft_probs is None:
        dummy = torch.empty(1, dtype=torch.float32, device=dev)
        return 0, dummy, drafts, 1
    if isinstance(draft_probs, tuple):
        ids, probs = draft_probs
        return (2, probs.to(device=dev, dtype=torch.float32).contiguous(),
                ids.to(device=dev, dtype=torch.int64).contiguous(), ids.shape[-1])
    return 1, draft_probs.contiguous(), drafts, draft_probs.shape[-1]
