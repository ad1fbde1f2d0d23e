"""The Triton backend equals the torch backend token for token (CPU, TRITON_INTERPRET=1).

Vocab 111 and 1000 (several tiles, partial last tile), B = 8 rows that differ in every
setting (greedy, top-k incl. k near V, top-p incl. flat rows that need the exact bisection,
min-p, penalties over a history, logit bias, grammar bitmasks), fp32/bf16/fp16 logits, flat
(slow path) and peaked (candidate path) rows, a batch without filters (its tokens left
undivided by the temperature in the tile kernel), a grammar edge inside a tile (candidate path),
a tile with more candidates than slots, top-p's crossing among distinct logits that share one
float32 probability (slow path and candidates), the patch kernel's values where history, bias and
drafts overlap and for long lists, and verify with K up to 3 for none/dense/sparse
draft probabilities, mixed num_draft and none given.

The interpreter runs in one subprocess per group (in parallel), so TRITON_INTERPRET never
leaks into this pytest process (GPU tests in the same session use real kernels). Their time
limit only guards against a hang: a clean-clone CI took 684 s in all on one day and had the
groups still running at 900 s on a machine about 3.7x slower (2026-12-06).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# "-cmax16" groups keep CMAX = 16 candidates a row, so that most filtered rows raise their
# bound (by the level counts, else the histogram) and many exceed the list; "-knobs-off" also
# turns the measurement knobs off (the finish's histogram raise alone and draw by positions,
# the tile's per-row sums and argmax in every row) and keeps pval as [N, V] (the layout of
# V > 65536; the other groups' verify calls take [B, V, K + 1])
GROUPS = {"v111": 111, "v1000": 1000, "v1000-cmax16": 1000, "v1000-cmax16-knobs-off": 1000}
KNOBS_OFF = {"SONICSPEC_LEVEL_RAISE": "0", "SONICSPEC_PICK_FUSED": "0",
             "SONICSPEC_SUM_AT_MAX": "0", "SONICSPEC_ARG_GREEDY": "0", "SONICSPEC_PVAL_T": "0",
             "SONICSPEC_TILE_SCAN": "0", "SONICSPEC_FINISH_EARLY": "0"}
# the tile's ranked stores out of line (SCAN 2, the default above V = 65536) in the CMAX = 16
# group, whose many filtered rows take them often; requests in chunks (`triton_backend.
# chunk_bounds`, one after another on the CPU) in that group (5, then 2 at a time) and in
# v111 (3 at a time)
CMAX16 = {"SONICSPEC_TILE_SCAN": "2", "SONICSPEC_CHUNKS": "5,2"}
CHUNKED = {"SONICSPEC_CHUNKS": "3"}


def params_for(vocab: int) -> list:
    from sampler import SamplingParams

    return [
        SamplingParams(temperature=0),
        SamplingParams(),
        SamplingParams(temperature=0.8, top_k=5, repetition_penalty=1.2),
        SamplingParams(temperature=0.7, top_p=0.8),
        SamplingParams(min_p=0.1, repetition_penalty=1.3, frequency_penalty=0.5,
                       presence_penalty=0.3, logit_bias={3: 4.0, vocab - 1: -2.0}),
        SamplingParams(top_k=vocab - 3, top_p=0.95),
        SamplingParams(temperature=0.9, top_k=40, top_p=0.9, min_p=0.02,
                       repetition_penalty=1.1, frequency_penalty=0.2, presence_penalty=-0.4,
                       logit_bias={7: 1.5}),
        SamplingParams(temperature=1.5, top_p=0.99),
    ]


def make_batch(vocab: int, positions: int, seed: int):
    import torch

    from sampler import SamplingBatch

    g = torch.Generator().manual_seed(seed)
    rows = 8
    hist = torch.randint(0, vocab, (rows, 24), generator=g).tolist()
    words = (vocab + 31) // 32
    mask = torch.full((rows, positions, words), -1, dtype=torch.int32)
    mask[0] = torch.randint(-2**31, 2**31 - 1, (positions, words), generator=g, dtype=torch.int32)
    mask[6] = torch.randint(-2**31, 2**31 - 1, (positions, words), generator=g, dtype=torch.int32)
    return SamplingBatch.from_requests(params_for(vocab), [h[:12] for h in hist],
                                       [h[12:] for h in hist], vocab, num_positions=positions,
                                       grammar_bitmask=mask,
                                       seeds=[seed * 100 + r for r in range(rows)])


def run_group(vocab: int) -> dict[str, list]:
    """Every case of one vocab: {case: [mismatch description, ...]} (empty = equal)."""
    import torch

    from sampler import torch_backend as ref
    from sampler import triton_backend as tri

    results: dict[str, list] = {}
    g = torch.Generator().manual_seed(vocab)
    dtypes = [torch.float32, torch.bfloat16, torch.float16] if vocab < 200 else [torch.float32]
    for dtype in dtypes:
        for seed in (1, 2) if dtype == torch.float32 else (3,):
            scale = 8 if seed == 2 else 2  # peaked rows take the candidate path, flat the slow
            logits = (torch.randn(8, vocab, generator=g) * scale).to(dtype)
            batch = make_batch(vocab, 1, seed)
            a = ref.sample(logits, batch).tokens
            b = tri.sample(logits, batch).tokens
            results[f"sample-{str(dtype)[6:]}-{seed}"] = _diff(a, b)
    results["temperature-only"] = _temperature_only(vocab)
    results["top-p-tie"] = _top_p_tie(vocab)
    if os.environ.get("SONICSPEC_CHUNKS"):  # (the group's calls did run in chunks)
        results["chunked"] = [] if len(tri.chunk_bounds(8, vocab)) > 1 else ["one chunk"]
    if vocab < 200:
        results["patch-values"] = _patch_values(vocab)
        results["minp-bound-fallback"] = _minp_fallback(vocab)
    if vocab >= 1000:
        results["patch-long-lists"] = _patch_long(vocab)
        results["sample-grammar-edge"] = _grammar_edge(vocab)
        results["sample-tile-overflow"] = _tile_overflow(vocab)
        results["sample-tile-pairs"] = _tile_pairs(vocab)
        results["thresholds"] = _thresholds()
    k = 3 if vocab < 200 else 2
    logits = torch.randn(8, k + 1, vocab, generator=g) * 2
    q = torch.softmax(torch.randn(8, k, vocab, generator=g) * 1.5, -1)
    ids = torch.randint(0, vocab, (8, k, 6), generator=g)
    ids[:, :, 0] = torch.multinomial(q.view(-1, vocab), 1, generator=g).view(8, k)
    sparse = (ids, torch.rand(8, k, 6, generator=g) / 3)
    num_draft = torch.tensor([k, k, k - 1, 0, k, 1, k, k])
    for mode, probs in (("none", None), ("dense", q), ("sparse", sparse)):
        drafts = torch.multinomial(q.view(-1, vocab), 1, generator=g).view(8, k)
        if mode == "none":
            drafts[:, 0] = logits[:, 0].argmax(-1)  # greedy rows accept sometimes
        drafts[7, 0] = vocab + 5  # out of vocab: rejected, touches no other row
        batch = make_batch(vocab, k + 1, 7)
        a = ref.verify(logits, drafts, batch, probs, num_draft)
        b = tri.verify(logits, drafts, batch, probs, num_draft)
        results[f"verify-{mode}"] = (_diff(a.tokens, b.tokens)
                                     + _diff(a.num_accepted, b.num_accepted)
                                     + _diff(a.num_emitted, b.num_emitted))
    # peaked logits, every row drafting K tokens (no num_draft tensor)
    peaked = logits * 4
    drafts = peaked[:, :k].argmax(-1)
    drafts[1::2, 1] = 3
    batch = make_batch(vocab, k + 1, 9)
    a = ref.verify(peaked, drafts, batch)
    b = tri.verify(peaked, drafts, batch)
    results["verify-peaked"] = (_diff(a.tokens, b.tokens) + _diff(a.num_accepted, b.num_accepted)
                                + _diff(a.num_emitted, b.num_emitted))
    return results


def _temperature_only(vocab: int) -> list:
    """A batch without top-k / top-p / min-p, where the tile kernel leaves the tokens
    undivided by the temperature (LAZY_TEMP): temperatures below and above 1, one under the
    exact division's fast range (divided token by token), greedy, penalties, bias and a
    grammar; sample (flat and peaked) and verify."""
    import torch

    from sampler import SamplingBatch, SamplingParams
    from sampler import torch_backend as ref
    from sampler import triton_backend as tri

    g = torch.Generator().manual_seed(vocab + 5)
    params = [SamplingParams(temperature=0.7), SamplingParams(temperature=1.3,
                                                              repetition_penalty=1.2),
              SamplingParams(temperature=0), SamplingParams(),
              SamplingParams(temperature=0.5, frequency_penalty=0.4, logit_bias={3: 2.0}),
              SamplingParams(temperature=2.5), SamplingParams(temperature=1e-7),
              SamplingParams(temperature=0.9, presence_penalty=0.3)]
    rows, k = len(params), 2
    words = (vocab + 31) // 32
    mask = torch.full((rows, k + 1, words), -1, dtype=torch.int32)
    mask[5] = torch.randint(-2**31, 2**31 - 1, (k + 1, words), generator=g, dtype=torch.int32)
    hist = torch.randint(0, vocab, (rows, 10), generator=g).tolist()
    out = []
    for positions in (1, k + 1):
        batch = SamplingBatch.from_requests(params, [h[:5] for h in hist], [h[5:] for h in hist],
                                            vocab, num_positions=positions,
                                            grammar_bitmask=mask[:, :positions],
                                            seeds=[31 + r for r in range(rows)])
        if positions == 1:
            for scale in (2, 8):
                logits = torch.randn(rows, vocab, generator=g) * scale
                out += _diff(ref.sample(logits, batch).tokens, tri.sample(logits, batch).tokens)
        else:
            logits = torch.randn(rows, k + 1, vocab, generator=g) * 3
            drafts = torch.multinomial(torch.softmax(logits[:, :k].reshape(-1, vocab), -1), 1,
                                       generator=g).view(rows, k)
            a, b = ref.verify(logits, drafts, batch), tri.verify(logits, drafts, batch)
            out += (_diff(a.tokens, b.tokens) + _diff(a.num_accepted, b.num_accepted))
    return out


def _patch_values(vocab: int) -> list:
    """The patch kernel alone, on verify rows whose history, logit bias and earlier drafts
    overlap (an id in all three, repeated drafts, a draft past num_draft): see `_check_patch`."""
    import torch

    from sampler import SamplingParams

    params = [SamplingParams(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.3,
                             logit_bias={5: 2.0, 9: -1.0, 40: 0.5}),
              SamplingParams(repetition_penalty=1.5, logit_bias={5: 3.0}),
              SamplingParams(frequency_penalty=0.7, logit_bias={9: 1.0}),
              SamplingParams(presence_penalty=0.9)]
    prompts = [[5, 9, 9, 20], [5, 40], [9, 30, 31], [1, 2, 3]]
    outputs = [[9, 20, 20], [40, 40], [], [5, 5, 6]]
    drafts = torch.tensor([[5, 5, 9], [40, 7, 40], [9, 9, 9], [6, 50, 6]])
    return _check_patch(vocab, params, prompts, outputs, drafts, torch.tensor([3, 2, 1, 3]))


def _patch_long(vocab: int) -> list:
    """The same for long lists: 700 distinct history ids and 100 bias entries (several
    chunks of each in the kernel), drafts inside both."""
    import torch

    from sampler import SamplingParams

    g = torch.Generator().manual_seed(4)
    hist = torch.randperm(vocab, generator=g)[:700].tolist()
    bias = {int(t): float(v) for t, v in zip(torch.randperm(vocab, generator=g)[:100],
                                             torch.randn(100, generator=g))}
    params = [SamplingParams(repetition_penalty=1.2, frequency_penalty=0.3, presence_penalty=0.1,
                             logit_bias=bias), SamplingParams(frequency_penalty=0.5)]
    prompts, outputs = [hist[:400], hist[100:200]], [hist[300:] + hist[350:500], hist[:50]]
    drafts = torch.tensor([[hist[0], next(iter(bias)), 999], [hist[60], hist[60], hist[10]]])
    return _check_patch(vocab, params, prompts, outputs, drafts, None)


def _check_patch(vocab, params, prompts, outputs, drafts, num_draft) -> list:
    """Run `triton_backend.patch` for these requests (verify, K = drafts' width): a request's
    patched ids are exactly history | bias | drafts (below num_draft), and the value there
    in each of its rows is bit-identical to the torch processing (penalties from the
    history plus the earlier drafts, then bias; a later draft's logit unchanged)."""
    import torch

    from sampler import SamplingBatch
    from sampler import triton_backend as tri
    from sampler.processing import process
    from sampler.torch_backend import _expand_positions

    rows, k = drafts.shape
    batch = SamplingBatch.from_requests(params, prompts, outputs, vocab, num_positions=k + 1)
    logits = torch.randn(rows, k + 1, vocab, generator=torch.Generator().manual_seed(3)) * 3
    # not zeroed: the patch programs zero their requests' words themselves
    bits = torch.full((rows, (vocab + 31) // 32), -1, dtype=torch.int32)
    pval = tri.patch(logits, drafts, num_draft, batch.head(rows), bits)
    nd = torch.full((rows,), k) if num_draft is None else num_draft
    expanded, _, earlier = _expand_positions(batch, rows, k + 1, drafts, nd)
    want = process(logits.reshape(-1, vocab), expanded, None, earlier).scores
    ids = torch.arange(vocab)
    hit = ((bits[:, ids // 32] >> (ids % 32)) & 1) != 0
    touched = torch.zeros_like(hit)
    for b in range(rows):
        for t in prompts[b] + outputs[b] + list(params[b].logit_bias or {}) + \
                [int(d) for d in drafts[b, :int(nd[b])] if 0 <= d < vocab]:
            touched[b, t] = True
    out = []
    if not torch.equal(hit, touched):
        out.append(f"patched ids {hit.nonzero().tolist()} != {touched.nonzero().tolist()}")
    rows_hit = hit.repeat_interleave(k + 1, 0)
    if not torch.equal(pval[rows_hit], want[rows_hit]):
        out.append(f"values {pval[rows_hit].tolist()} != {want[rows_hit].tolist()}")
    return out


def _triton_sample(logits, batch):
    """The triton backend's `_run` for `sample` (one position, no drafts): its tokens and
    the path each row resolved by."""
    import torch

    from sampler import triton_backend as tri

    rows = logits.shape[0]
    return tri._run(logits[:, None], torch.empty(rows, 0, dtype=torch.int64), batch, None, None)


def _paths_all_1(out) -> list:
    """[] when every row resolved from the tile candidates (path 1), else the paths."""
    return [] if bool((out.path == 1).all()) else [f"paths {out.path.tolist()} (want all 1)"]


def _grammar_edge(vocab: int) -> list:
    """A grammar whose allowed ids start inside a tile (ids >= 448: two live rows of 32 in
    the tile 256..511) that holds the row max: the filtered rows still resolve from the tile
    candidates (path 1), not from the row-serial second chance, and equal torch."""
    import torch

    from sampler import SamplingBatch, SamplingParams
    from sampler import torch_backend as ref

    g = torch.Generator().manual_seed(5)
    params = [SamplingParams(temperature=0.8, top_k=2), SamplingParams(temperature=0.7, top_p=0.8),
              SamplingParams(min_p=0.1), SamplingParams(temperature=1.2, top_p=0.95, min_p=0.05)]
    rows = 2 * len(params)
    logits = torch.randn(rows, vocab, generator=g) * 8
    logits[:, 460] += 40
    mask = torch.full((rows, 1, (vocab + 31) // 32), -1, dtype=torch.int32)
    mask[:, :, :14] = 0
    batch = SamplingBatch.from_requests(params * 2, [[]] * rows, [[]] * rows, vocab,
                                        grammar_bitmask=mask, seeds=list(range(rows)))
    out = _triton_sample(logits, batch)
    return _diff(ref.sample(logits, batch).tokens, out.tokens[:, 0]) + _paths_all_1(out)


def _minp_fallback(vocab: int) -> list:
    """A min-p row whose threshold (min-p's cut below the unpenalised max, MINP_BOUND) lies
    above what it keeps: its max token is in its history under a strong repetition penalty,
    so the processed max is far lower, and ten tokens it keeps lie below the threshold. The
    row stage must see that the cut may lie at or below its bound (no candidate path) and
    resolve exactly on a slow path; the rows without the penalty take the candidates. Both
    equal torch."""
    import torch

    from sampler import SamplingBatch, SamplingParams
    from sampler import torch_backend as ref

    g = torch.Generator().manual_seed(13)
    rows = 8
    logits = torch.randn(rows, vocab, generator=g) * 2
    logits[:, 5] = 20.0
    logits[:, 10:20] = 6.0  # kept beside the penalised max, below the unpenalised cut
    params = [SamplingParams(min_p=0.1, repetition_penalty=3.0 if r % 2 == 0 else 1.0,
                             temperature=0.9) for r in range(rows)]
    batch = SamplingBatch.from_requests(params, [[5, 9]] * rows, [[]] * rows, vocab,
                                        seeds=list(range(rows)))
    out = _triton_sample(logits, batch)
    path = out.path.view(-1)
    want = torch.tensor([1 if r % 2 else 3 for r in range(rows)], dtype=path.dtype)
    paths = [] if bool(((path == 1) == (want == 1)).all()) else [f"paths {path.tolist()}"]
    return _diff(ref.sample(logits, batch).tokens, out.tokens[:, 0]) + paths


def _top_p_tie(vocab: int) -> list:
    """Top-p's crossing inside a group of tokens with distinct logits that share one float32
    probability: their x - M (M = 1) rounds to one float32 (x = -1e-3 - i ulps). The spec
    compares probabilities, so it keeps the whole group; a cut in logit order (the slow
    path's bisection before the fuzz's GPU case 43016) kept two of its tokens. At V = 1000
    about 700 tokens are kept (the slow path, path 3, checked), at V = 111 about 80 (the
    candidates). Sample and verify (K = 1, both positions alike) equal torch."""
    import torch

    from sampler import SamplingBatch, SamplingParams
    from sampler import torch_backend as ref
    from sampler import triton_backend as tri

    g = torch.Generator().manual_seed(17)
    n_a, n_g = vocab * 2 // 5, vocab * 3 // 10
    perm = torch.randperm(vocab, generator=g)
    x = -3 - 3 * torch.rand(vocab, generator=g)  # (the rest: far below the crossing)
    x[perm[:n_a]] = 0.5 + 0.5 * torch.rand(n_a, generator=g)
    x[perm[0]] = 1.0
    group = torch.full((n_g,), -1e-3, dtype=torch.float32)
    for i in range(1, n_g):  # each one ulp below the last
        group[i] = torch.nextafter(group[i - 1], torch.tensor(-1.0))
    x[perm[n_a:n_a + n_g]] = group
    assert int((x - x.max()).unique().numel()) < vocab - n_g + 2  # (the group's x - M: one)
    w = torch.exp(x - x.max()).double()
    total = float(w.sum())
    top_p = (float(w[perm[:n_a]].sum()) + 1.5 * float(w[perm[n_a]])) / total
    rows = 8
    params = [SamplingParams(top_p=top_p, temperature=1.0) for _ in range(rows)]
    batch = SamplingBatch.from_requests(params, [[]] * rows, [[]] * rows, vocab,
                                        seeds=list(range(rows)))
    logits = x.expand(rows, vocab).contiguous()
    out = _triton_sample(logits, batch)
    bad = _diff(ref.sample(logits, batch).tokens, out.tokens[:, 0])
    if vocab >= 1000 and not bool((out.path == 3).all()):
        bad.append(f"paths {out.path.tolist()} (want all 3)")
    vb = SamplingBatch.from_requests(params, [[]] * rows, [[]] * rows, vocab, num_positions=2,
                                     seeds=list(range(rows)))
    vl = logits[:, None].expand(rows, 2, vocab).contiguous()
    drafts = perm[n_a + n_g - 1 - torch.arange(rows)][:, None]  # (group tokens, the last ones)
    a, b = ref.verify(vl, drafts, vb), tri.verify(vl, drafts, vb)
    return (bad + _diff(a.tokens, b.tokens) + _diff(a.num_accepted, b.num_accepted)
            + _diff(a.num_emitted, b.num_emitted))


def _tile_overflow(vocab: int) -> list:
    """Two 32-token rows of one tile far above the rest: more tokens clear the tile's
    threshold than its C slots hold, so the row stage must trust only that tile's max
    (the rows then resolve exactly on the slow paths) and still equal torch."""
    import torch

    from sampler import SamplingBatch, SamplingParams
    from sampler import torch_backend as ref

    g = torch.Generator().manual_seed(11)
    params = [SamplingParams(top_p=0.9), SamplingParams(temperature=0.8, top_k=20),
              SamplingParams(min_p=0.5), SamplingParams(temperature=1.3, top_p=0.7)]
    rows = 2 * len(params)
    logits = torch.randn(rows, vocab, generator=g) * 0.5
    logits[:, 256:320] = 6 + torch.randn(rows, 64, generator=g) * 0.3
    batch = SamplingBatch.from_requests(params * 2, [[]] * rows, [[]] * rows, vocab,
                                        seeds=list(range(rows)))
    out = _triton_sample(logits, batch)
    return _diff(ref.sample(logits, batch).tokens, out.tokens[:, 0])


def _tile_pairs(vocab: int) -> list:
    """Tokens above the threshold two to a 32-token row (the tiles' rare path: SCAN 1's inline
    ranks, SCAN 2's `_scan_store`, SCAN 0's counter), one to a row, and three in one row of
    another tile, above a flat background that the threshold does not clear; with a
    penalty, a bias and a grammar on the paired tokens and a temperature, so the rare
    path's values go through every step. The filtered rows resolve from the tile candidates
    (path 1) and equal torch. (It also covers `experiments/scan3-pair-rows.diff`.)"""
    import torch

    from sampler import SamplingBatch, SamplingParams
    from sampler import torch_backend as ref

    g = torch.Generator().manual_seed(17)
    pairs = [(32 + 3, 32 + 30), (160 + 7, 160 + 8), (832 + 0, 832 + 31), (960 + 5, 960 + 20)]
    singles = [100, 300, 520, 700]
    three = [(384 + 1, 384 + 9, 384 + 17)]
    hot = [i for p in pairs + three for i in p] + singles
    params = [SamplingParams(temperature=0.7, top_k=6, repetition_penalty=1.5),
              SamplingParams(top_p=0.9, presence_penalty=0.7, logit_bias={62: 1.5}),
              SamplingParams(temperature=1.3, top_p=0.8, min_p=0.02),
              SamplingParams(temperature=0.9, top_k=12, top_p=0.95)]
    rows = 2 * len(params)
    logits = torch.full((rows, vocab), -20.0)
    logits[:, hot] = 1.0 + torch.randn(rows, len(hot), generator=g)
    mask = torch.full((rows, 1, (vocab + 31) // 32), -1, dtype=torch.int32)
    mask[:, :, 20] = 0  # (a background word off: the rows read their grammar words)
    history = [[35, 167, 965]] * rows
    batch = SamplingBatch.from_requests(params * 2, [[]] * rows, history, vocab,
                                        grammar_bitmask=mask, seeds=list(range(rows)))
    out = _triton_sample(logits, batch)
    return _diff(ref.sample(logits, batch).tokens, out.tokens[:, 0]) + _paths_all_1(out)


def _thresholds() -> list:
    """The candidate thresholds of `_pre_kernel` (a 1/8 sample in 64 groups: at V = 20000 in
    one step of one program, the group maxima in registers; at V = 40000 in steps of 16
    groups, stored, then four, two or one programs per row meeting through the atomic
    ticket), against torch on the same sample (`bench/threshold_sim.py`): the RANK-th
    largest group max (grammar applied) divided by the temperature; for the min-p-only row
    (2) the higher of that and min-p's cut below the sample's max, ln(min_p) under it
    (`triton_kernels.MINP_BOUND`), which must be above the rank's here (else the bound is
    not exercised)."""
    out = []
    for vocab, parts in ((20000, (1,)), (40000, (1, 2, 4))):
        out += _thresholds_at(vocab, parts)
    return out


def _thresholds_at(vocab: int, all_parts: tuple) -> list:
    import torch

    from bench.threshold_sim import thresholds
    from sampler import SamplingBatch, SamplingParams
    from sampler import triton_backend as tri

    rows = 4
    want_gb = 64 if vocab <= 32768 else 16
    if tri.sample_plan(vocab)["GB"] != want_gb:
        return [f"V={vocab}: GB {tri.sample_plan(vocab)['GB']} != {want_gb}"]
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(rows, vocab, generator=g) * 8
    params = [SamplingParams(temperature=0.7, top_k=50), SamplingParams(top_p=0.9),
              SamplingParams(temperature=1.3, min_p=0.1), SamplingParams(temperature=0.9,
                                                                          top_k=5)]
    words = (vocab + 31) // 32
    mask = torch.full((rows, 1, words), -1, dtype=torch.int32)
    mask[2, :, : words * 3 // 4] = 0  # row 2: only the last quarter allowed,
    mask[2, :, words * 3 // 4:: 2] = 0x55555555  # and in every other word of it every other id
    batch = SamplingBatch.from_requests(params, [[]] * rows, [[]] * rows, vocab,
                                        grammar_bitmask=mask)
    allowed = (mask[:, 0, torch.arange(vocab) // 32] >> (torch.arange(vocab) % 32)) & 1
    want, top = thresholds(torch.where(allowed != 0, logits, float("-inf")), vocab, True)
    want = torch.stack([want[r, 0] / params[r].temperature for r in range(rows)])
    out = []
    cut = top[2, 0] / params[2].temperature + math.log(params[2].min_p)
    cut = cut - 1e-3 - 1e-5 * abs(cut)
    if not cut > want[2]:
        out.append(f"V={vocab}: min-p cut {float(cut)} not above the rank's {float(want[2])}")
    want[2] = cut
    saved = tri.thr_parts
    try:
        for parts in all_parts:
            tri.thr_parts = lambda rows, gb, p=parts: p
            tick = torch.zeros(rows, dtype=torch.int32)
            none = torch.empty(rows, 0, dtype=torch.int64)
            bits = torch.empty(1, dtype=torch.int32)
            for call in range(2):  # the tickets are zero again after a call: reusable
                thr = torch.empty(rows)
                tri._pre(logits[:, None], none, None, batch.head(rows), bits, False, tick, thr)
                # (the min-p row's cut through a float32 log: equal within its rounding)
                if not (torch.equal(thr[[0, 1, 3]], want[[0, 1, 3]])
                        and torch.isclose(thr[2], want[2], rtol=1e-6, atol=1e-6)):
                    out.append(f"V={vocab} parts={parts} call {call}: {thr.tolist()} != "
                               f"{want.tolist()}")
                if bool(tick.any()):
                    out.append(f"V={vocab} parts={parts} call {call}: tickets left at "
                               f"{tick.tolist()}")
    finally:
        tri.thr_parts = saved
    return out


def _diff(a, b) -> list:
    return [] if bool((a == b).all()) else [f"torch {a.tolist()} != triton {b.tolist()}"]


@pytest.fixture(scope="module")
def interpreted() -> dict[str, dict[str, list]]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT),
           "CUDA_VISIBLE_DEVICES": ""}
    procs = {name: subprocess.Popen([sys.executable, __file__, name], cwd=ROOT,
                                    env={**env, **KNOBS_OFF}
                                    if name.endswith("-knobs-off")
                                    else {**env, **CMAX16} if name.endswith("-cmax16")
                                    else {**env, **CHUNKED} if name == "v111"
                                    else env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in GROUPS}
    out = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=2700)
        assert proc.returncode == 0, stderr[-3000:]
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("group", list(GROUPS))
def test_triton_matches_torch_token_for_token(interpreted, group: str) -> None:
    """Property: seeded tokens (and accepted counts) of every case equal the torch backend's."""
    cases = interpreted[group]
    assert len(cases) >= 5
    bad = {case: diff for case, diff in cases.items() if diff}
    assert not bad, bad


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(ROOT))
    import interpret_fast  # (this file's folder is on the path: the interpreter's shortcuts)

    interpret_fast.install()
    if "-cmax16" in sys.argv[1]:
        from sampler import triton_backend

        triton_backend.CMAX = 16
    print(json.dumps(run_group(GROUPS[sys.argv[1]])))
