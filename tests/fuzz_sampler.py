"""Differential fuzz: the Triton backend against the torch backend on random batches.

Each case draws a vocabulary, a batch of rows with random settings (temperature including
greedy and tiny values, top-k from 1 to V, top-p, min-p, every penalty, logit bias up to
+-100, histories with repeats, grammar masks down to one allowed token, logprobs), random
logits (any scale, ties on a coarse grid, spikes, fp32 / bf16 / fp16) and either `sample` or
`verify` (K 1-3, drafts from the logits or anywhere in the vocabulary, none / dense / sparse
draft probabilities, num_draft per row). Tokens, accepted and emitted counts must be equal;
logprobs' ids equal and values within 1e-4. A mismatch prints its case seed, which
`--case SEED` repeats alone; `--case SEED --explain ROW POS` says whether that row's top-p
is a float32 rounding tie of the torch backend itself (its kept set moves when the normaliser
of p = w / s moves by an ulp or two, as another summation order moves it) and how close its
draw's target lies to a token boundary (within float32 rounding of the kernels' tile
masses). `--ulp-groups` draws logits one float32 ulp apart in half the cases, which makes
such ties common.

CPU (the kernels under the interpreter, slow: CI runs 16 fixed cases, tests/test_sampler_fuzz.py):
    python tests/fuzz_sampler.py --minutes 30 [--start 0]
    python tests/fuzz_sampler.py --case 17
    SONICSPEC_TILE_SCAN=2 SONICSPEC_CHUNKS=5,2 python tests/fuzz_sampler.py --cmax 16 ...
On a GPU the same script runs the real kernels (`--device cuda`, larger vocabularies;
`--vocabs 151936 262144 --rows 64` for the calls in two halves; `bench/gpu_fuzz.sh` runs
several processes at once).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if "cuda" not in sys.argv:  # (the CPU runs the kernels under the interpreter: set before
    os.environ.setdefault("TRITON_INTERPRET", "1")  # triton is imported)
sys.path[0] = str(Path(__file__).resolve().parents[1])
sys.path.insert(1, str(Path(__file__).resolve().parent))  # (the tests' helpers)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from test_sampler_distribution import pack_bitmask  # noqa: E402

from sampler import SamplingBatch, SamplingParams  # noqa: E402
from sampler import torch_backend as ref  # noqa: E402
from sampler import triton_backend as tri  # noqa: E402
from sampler.processing import kept_weights, min_p_mask, row_max, top_k_mask, top_p_mask  # noqa: E402
from sampler.rng import Stream, uniform  # noqa: E402
from sampler.sampling import inverse_cdf  # noqa: E402
from sampler.torch_backend import process_rows  # noqa: E402

if os.environ.get("TRITON_INTERPRET") == "1":
    import interpret_fast  # (the interpreter's shortcuts: same results, faster)

    interpret_fast.install()

CPU_VOCABS = (37, 111, 257, 1000, 1500, 2100)
GPU_VOCABS = (111, 1000, 32000, 50257, 128256)


def random_params(rng: random.Random, vocab: int) -> SamplingParams:
    def pick(*options):
        return rng.choice(options)

    bias = {}
    for _ in range(pick(0, 0, 0, 1, 3, 12)):
        bias[rng.randrange(vocab)] = pick(rng.uniform(-5, 5), 100.0, -100.0, rng.uniform(-100, 100))
    return SamplingParams(
        temperature=pick(0.0, 1.0, rng.uniform(0.05, 3.0), rng.uniform(0.3, 1.5),
                         rng.uniform(0.3, 1.5), 1e-6, 1e-3),
        top_k=pick(0, 0, 1, 2, 5, rng.randint(1, vocab), vocab, rng.randint(1, min(vocab, 64))),
        top_p=pick(1.0, 1.0, rng.uniform(0.01, 1.0), 0.5, 0.9, 0.999, 1e-3),
        min_p=pick(0.0, 0.0, rng.uniform(0.0, 0.5), rng.uniform(0.0, 0.999), 0.9),
        repetition_penalty=pick(1.0, 1.0, rng.uniform(0.5, 2.0), 1e-3, 50.0),
        frequency_penalty=pick(0.0, 0.0, rng.uniform(-2, 2), 2.0, -2.0),
        presence_penalty=pick(0.0, 0.0, rng.uniform(-2, 2), 2.0, -2.0),
        logit_bias=bias,
        logprobs=pick(0, 0, 0, 0, 1, 5, 20),
    )


def random_history(rng: random.Random, vocab: int) -> list[int]:
    n = rng.choice((0, 1, 5, 30, 200))
    pool = rng.choice((vocab, 3, 10))  # (a small pool: many repeats of the same ids)
    ids = [rng.randrange(vocab) for _ in range(pool)] if pool < vocab else None
    return [rng.choice(ids) if ids else rng.randrange(vocab) for _ in range(n)]


def random_logits(rng: random.Random, shape: tuple[int, ...], device: str,
                  ulp_groups: bool = False) -> tuple[torch.Tensor, bool]:
    """Random logits of `shape` on `device`, and whether `ulp_group` made them."""
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    x = torch.randn(shape, generator=g) * rng.choice((0.05, 1.0, 2.0, 2.0, 3.0, 8.0, 30.0))
    kind = rng.choice(("plain", "plain", "grid", "spike", "flat"))
    if kind == "grid":  # many exact ties
        x = torch.round(x * 2) / 2
    elif kind == "spike":
        idx = torch.randint(0, shape[-1], shape[:-1] + (3,), generator=g)
        x.scatter_(-1, idx, 40.0)
    elif kind == "flat":
        x = torch.zeros(shape)
    dtype = rng.choice((torch.float32, torch.float32, torch.bfloat16, torch.float16))
    grouped = ulp_groups and bool(torch.rand((), generator=g) < 0.5)
    if grouped:
        x = ulp_group(x, g)
    return x.to(dtype).to(device), grouped


def ulp_group(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """10-50% of the ids (the same in every row) set to one small negative logit and then
    one float32 ulp apart each, with the row max at least 1: distinct logits whose x - M
    round to a few float32 values, so top-p's crossing often falls among tokens that share
    one probability (the tie the GPU fuzz's case 43016 found). Draws from g only (the
    case's other draws unchanged)."""
    vocab = x.shape[-1]
    n = int(vocab * (0.1 + 0.4 * float(torch.rand((), generator=g))))
    ids = torch.randperm(vocab, generator=g)[:n]
    base = torch.tensor(-1e-3 * float(torch.rand((), generator=g)) - 1e-6)
    # (for a negative float32, its bits + i is the value i ulps further from zero)
    group = (base.view(torch.int32) + torch.arange(n, dtype=torch.int32)).view(torch.float32)
    x = x.clone()
    x[..., ids] = group
    top = torch.randint(0, vocab, (), generator=g)
    x[..., top] = torch.maximum(x.amax(-1), torch.tensor(1.0))
    return x


def random_mask(rng: random.Random, rows: int, positions: int, vocab: int) -> torch.Tensor | None:
    if rng.random() < 0.5:
        return None
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    words = (vocab + 31) // 32
    mask = torch.full((rows, positions, words), -1, dtype=torch.int32)
    for r in range(rows):
        kind = rng.choice(("all", "half", "sparse", "one"))
        if kind == "half":
            mask[r] = torch.randint(-2**31, 2**31 - 1, (positions, words), generator=g,
                                    dtype=torch.int32)
        elif kind in ("sparse", "one"):
            for j in range(positions):
                n = 1 if kind == "one" else rng.randint(1, max(1, vocab // 20))
                allowed = np.zeros(vocab, dtype=bool)
                allowed[torch.randperm(vocab, generator=g)[:n].numpy()] = True
                mask[r, j] = pack_bitmask(allowed)[0, 0]
    return mask


def diff(name: str, a: torch.Tensor | None, b: torch.Tensor | None, tol: float = 0.0) -> list:
    if a is None and b is None:
        return []
    if a is None or b is None or a.shape != b.shape:
        return [f"{name}: shapes {None if a is None else tuple(a.shape)} / "
                f"{None if b is None else tuple(b.shape)}"]
    a, b = a.cpu(), b.cpu()
    if tol:
        same = torch.isclose(a.float(), b.float(), rtol=0, atol=tol) | (a == b)
    else:
        same = a == b
    if bool(same.all()):
        return []
    bad = (~same).nonzero()[:4].tolist()
    return [f"{name} differs at {bad}: torch {a[tuple(zip(*bad))].tolist()} "
            f"triton {b[tuple(zip(*bad))].tolist()}"]


def run_case(seed: int, device: str, vocabs: list[int] | None = None,
             max_rows: int = 8, ulp_groups: bool = False) -> tuple[str, list[str]]:
    """One random case; (its description, its differences). On a GPU a case that differs is
    run again with the torch backend on the CPU, which says whether the reference itself
    hinges on its float32 summation order there (torch's own CPU and CUDA results differ)."""
    vocabs = vocabs or (CPU_VOCABS if device == "cpu" else GPU_VOCABS)
    desc, out, tokens = _case(seed, device, vocabs, max_rows, ulp_groups)
    if out and device != "cpu":
        ref_cpu = _case(seed, "cpu", vocabs, max_rows, ulp_groups, reference_only=True)[2][0]
        out.append(cpu_verdict(*tokens, ref_cpu))
    return desc, out


def cpu_verdict(ref_gpu: torch.Tensor, triton: torch.Tensor, ref_cpu: torch.Tensor) -> str:
    """Whose tokens the torch backend on the CPU gives where torch on the GPU and triton
    differ, and where else (if anywhere) it departs from both (there the two agree: another
    row whose reference hinges on its float32 summation order)."""
    differ = ref_gpu != triton
    cpu, gpu, tri = ref_cpu[differ], ref_gpu[differ], triton[differ]
    line = "torch on the CPU: " + (
        "triton's tokens (a float32 rounding tie in torch itself)" if bool((cpu == tri).all())
        else "torch's tokens on the GPU" if bool((cpu == gpu).all()) else "neither's tokens")
    elsewhere = ((ref_cpu != ref_gpu) & ~differ).nonzero()[:4]
    if len(elsewhere):
        at = tuple(elsewhere.T)
        line += (f"; elsewhere it departs from both at {elsewhere.tolist()}: "
                 f"{ref_cpu[at].tolist()} against {ref_gpu[at].tolist()}")
    return line


@dataclass
class Case:
    """One case's inputs: `verify` is None for `sample`, else (drafts, draft probs, num_draft)."""
    desc: str
    logits: torch.Tensor
    batch: SamplingBatch
    verify: tuple | None = None


def draw_case(seed: int, device: str, vocabs, max_rows: int, ulp_groups: bool) -> Case:
    """Case `seed`'s inputs on `device` (every random draw of a case is made here)."""
    rng = random.Random(seed)
    vocab = rng.choice(vocabs)
    rows = rng.randint(1, max_rows)
    params = [random_params(rng, vocab) for _ in range(rows)]
    prompts = [random_history(rng, vocab) for _ in range(rows)]
    outputs = [random_history(rng, vocab) for _ in range(rows)]
    seeds = [rng.randrange(2**63) for _ in range(rows)]
    if rng.random() < 0.5:
        mask = random_mask(rng, rows, 1, vocab)
        batch = SamplingBatch.from_requests(params, prompts, outputs, vocab, device=device,
                                            grammar_bitmask=mask, seeds=seeds)
        logits, grouped = random_logits(rng, (rows, vocab), device, ulp_groups)
        case = Case(f"sample V={vocab} B={rows} {logits.dtype}", logits, batch)
    else:
        k = rng.randint(1, 3)
        mask = random_mask(rng, rows, k + 1, vocab)
        batch = SamplingBatch.from_requests(params, prompts, outputs, vocab, device=device,
                                            num_positions=k + 1, grammar_bitmask=mask,
                                            seeds=seeds)
        logits, grouped = random_logits(rng, (rows, k + 1, vocab), device, ulp_groups)
        g = torch.Generator().manual_seed(rng.randrange(2**31))
        drafts = torch.randint(0, vocab, (rows, k), generator=g)
        near = logits[:, :k].float().argmax(-1).cpu()
        drafts = torch.where(torch.rand(rows, k, generator=g) < 0.5, near, drafts).to(device)
        mode = rng.choice(("none", "dense", "sparse"))
        probs = None
        if mode == "dense":
            probs = torch.softmax(torch.randn(rows, k, vocab, generator=g) * 2, -1).to(device)
        elif mode == "sparse":
            m = rng.randint(1, 6)
            ids = torch.randint(0, vocab, (rows, k, m), generator=g)
            ids[:, :, 0] = drafts.cpu()
            probs = (ids.to(device), (torch.rand(rows, k, m, generator=g) / m).to(device))
        num_draft = None
        if rng.random() < 0.5:
            num_draft = torch.randint(0, k + 1, (rows,), generator=g).to(device)
        case = Case(f"verify V={vocab} B={rows} K={k} {mode} {logits.dtype}", logits, batch,
                    (drafts, probs, num_draft))
    case.desc += " ulp-group" if grouped else ""
    return case


def explain(seed: int, device: str, vocabs, max_rows: int, ulp_groups: bool, row: int,
            pos: int) -> None:
    """Print why a row's top-p may be a float32 rounding tie (the torch backend on `device`):
    its settings, the crossing, how many tokens share the threshold's probability, the kept
    count (and the emitted draw) when the normaliser s of p = w / s moves by a few ulps (a
    summation order moves it: torch on the CPU, torch on CUDA and the kernels' tile sums each
    sum in their own), and the draw of every kept set a rounding can give near the crossing.
    Top-p is taken over the row's top-k survivors, as in the spec."""
    case = draw_case(seed, device, vocabs, max_rows, ulp_groups)
    vocab = case.logits.shape[-1]
    rows, proc, n, x_all, alive_all = _row(case, row, pos)
    x, alive = x_all[n:n + 1], alive_all[n:n + 1]
    top_k, top_p = int(rows.top_k[n]), float(rows.top_p[n])
    print(f"row {row} position {pos} on {device}: temperature "
          f"{float(rows.temperature[n]):.4g}, top_k {top_k}, top_p {top_p:.9g}, min_p "
          f"{float(rows.min_p[n]):.4g}; {int(alive.sum())} tokens alive of {vocab} (after top-k)")
    draw_with = _explain_draw(case, rows, proc, row, pos)
    if top_p >= 1:
        print("no top-p")
        return
    # top-p on CUDA over the whole batch, as `top_p_mask` takes it: there a lone row's
    # cumulative sum is one device-wide scan, a batch's a scan per row with a block shape
    # set by the row count (ATen's ScanUtils.cuh), so the row alone rounds otherwise; on the
    # CPU a row sums alike alone or in its batch, and goes alone (129 sorts of the batch cost)
    wb, sb = _weights(x_all, alive_all)  # (batch-wide sums)
    lo, hi = (0, len(x_all)) if x_all.is_cuda else (n, n + 1)
    wb, sb, alive_b, top_p_b = (t[lo:hi] for t in (wb, sb, alive_all, rows.top_p))
    j = n - lo  # (the row's index among those)
    w, s0, top_ps = wb[j:j + 1], sb[j, 0], top_p_b[j:j + 1]

    def filtered(keep: torch.Tensor) -> torch.Tensor:
        """The row's kept weights [V] after min-p (a ratio to the max: s leaves it)."""
        if rows.min_p[n] > 0:
            keep = min_p_mask(x, keep, rows.min_p[n:n + 1])
        return torch.where(keep, w, 0.0)[0]

    @functools.cache
    def moved(k: int) -> tuple[int, torch.Tensor]:
        """(kept count, kept weights) with the normaliser s moved by k float32 ulps (s > 0:
        its bits + k are the value k ulps further from zero)."""
        s = sb.clone()
        s[j] = (s0.view(torch.int32) + k).view(torch.float32)
        keep = top_p_mask(wb / s, alive_b, top_p_b)[j:j + 1]
        return int(keep.sum()), filtered(keep)

    counts = [moved(k)[0] for k in range(-4, 5)]
    pb = wb / sb
    spb = pb.sort(dim=1, descending=True).values  # (the crossing's cumsum as top-p's)
    p, sp, cum = pb[j], spb[j], spb.cumsum(1)[j]
    c = int((cum < top_p).sum().clamp(max=int(alive.sum()) - 1))  # (the crossing)
    thr, tied = float(sp[c]), int((p == sp[c]).sum())
    margin = float(sp[: c + 1].double().sum()) - top_p
    print(f"kept {counts[4]}: threshold p {thr:.9g} shared by {tied} tokens; mass through "
          f"the crossing - top_p = {margin:.3g}")
    print(f"kept with s moved by -4..4 ulps: {counts}"
          + ("  (a float32 rounding tie)" if len(set(counts)) > 1 else ""))
    if draw_with is not None:
        draws = [draw_with(moved(k)[1]) for k in range(-4, 5)]
        print(f"the draw with s moved by -4..4 ulps: {draws}")
    # how far the kept set is from moving: the smallest shift within 64 ulps either way (the
    # cumulative sum's own float32 rounding over many tokens can move the crossing as far)
    for k in sorted(range(-64, 65), key=lambda k: (abs(k), k)):
        if moved(k)[0] != counts[4]:
            print(f"the kept set first moves with s moved by {k} ulps: {moved(k)[0]} kept"
                  + ("" if draw_with is None else f", the draw {draw_with(moved(k)[1])}"))
            break
    else:
        print("the kept set stays within 64 ulps of s either way")
    if draw_with is not None:
        # (p is a function of d = x - M rounded to float32: the cuts are by d)
        d = (x - row_max(torch.where(alive, x, float("-inf"))))[0]
        reach = [moved(k)[0] for k in range(-64, 65)]  # (the kept counts s's moves give)
        _explain_cuts(d, alive[0], counts[4], reach, top_ps, filtered, draw_with)


def _explain_cuts(d: torch.Tensor, alive: torch.Tensor, kept: int, reach: list[int],
                  top_p: torch.Tensor, filtered, draw_with, most: int = 48) -> None:
    """Print the draws of the kept sets {d >= v} over the distinct d = x - M (float32) from
    three above to three below those the torch backend keeps (`kept` tokens), the normaliser's
    moves give (`reach`: kept counts) and exact arithmetic keeps (`top_p_mask` over float64
    exp of each d); runs of cuts with one draw on one line, at most
    `most` cuts (evenly spaced beyond that). p = exp(d) / s is monotone in d under any
    rounding of exp, the normaliser s or the cumulative sum, so whatever float32 arithmetic a
    backend has, its top-p keeps one of these sets (whole groups of equal d: a rounding can
    merge them, never split them): a token found here is a rounding tie of the cut, one not
    found is not (unless the cut lies farther off)."""
    w64 = torch.where(alive, torch.exp(d.double()), 0.0)
    exact = int(top_p_mask((w64 / w64.sum())[None], alive[None], top_p).sum())
    vals, sizes = torch.unique_consecutive(d[alive].sort(descending=True).values,
                                           return_counts=True)
    counts = sizes.cumsum(0).tolist()  # (the kept count of the cut at each distinct d)
    ends = [counts.index(c) for c in {kept, exact, *reach} if c in counts]
    lo, hi = max(min(ends) - 3, 0), min(max(ends) + 4, len(counts))
    picks = list(range(lo, hi))
    if len(picks) > most:
        picks = sorted({*picks[:: -(-len(picks) // most)], *ends, hi - 1})
    runs: list[list] = []  # [first count, last count, draw]
    for i in picks:
        keep = (alive & (d >= vals[i]))[None]
        tok = draw_with(filtered(keep))
        if runs and runs[-1][2] == tok:
            runs[-1][1] = counts[i]
        else:
            runs.append([counts[i], counts[i], tok])
    print(f"the draws of the kept sets cut at the distinct x - M about the crossing "
          f"({len(picks)} of {hi - lo} cuts from {counts[lo]} to {counts[hi - 1]} kept):")
    for a, b, tok in runs:
        marks = [name for name, c in (("the torch backend's", kept), ("exact arithmetic's",
                                                                      exact))
                 if a <= c <= b]
        print(f"  kept {a}" + (f"..{b}" if b > a else "") + f": the draw {tok}"
              + (f"  ({', '.join(marks)} among them)" if marks else ""))
    print(f"exact arithmetic keeps {exact}, the torch backend {kept}")


def _weights(x: torch.Tensor, alive: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept weights exp(x - max) [N, V] and their sums [N, 1], over the whole batch as
    `softmax_kept` sums them (a row's sum alone can round otherwise, on the CPU too)."""
    w = kept_weights(torch.where(alive, x, float("-inf")))
    return w, w.sum(1, keepdim=True)


def _row(case: Case, row: int, pos: int) -> tuple:
    """The torch backend's view of one row and position of a case: (expanded rows, processed
    scores, the expanded index n, the temperature-scaled scores of every row [N, V], their
    top-k survivors), batch-wide as `filter_scaled` computes them (on CUDA a reduction's
    split, hence its float32 rounding, depends on the tensor's shape: a row alone can round
    otherwise than in its batch)."""
    drafts, _, num_draft = case.verify or (None, None, None)
    rows, proc = process_rows(case.logits, case.batch, drafts, num_draft)
    n = row if case.verify is None else row * case.logits.shape[1] + pos
    x = proc.scores / torch.where(rows.temperature == 0, 1.0, rows.temperature)[:, None]
    alive = (top_k_mask(x, rows.top_k, rows.max_top_k) if rows.max_top_k > 0
             else x > float("-inf"))
    return rows, proc, n, x, alive


def compare_stages(seed: int, device: str, vocabs, max_rows: int, ulp_groups: bool, row: int,
                   pos: int) -> None:
    """Print, stage by stage, where the torch backend on `device` and on the CPU part for one
    row and position of case `seed` (sampling rows: a draw, not a rejection): processed
    scores, top-k's kept set, the kept softmax (its exp weights and their sum), top-p's sorted
    cumulative sum at its crossing, the kept sets after top-p and min-p, the drawn token, and
    the backend's own draw from its filtered scores. Every stage runs on the whole batch, as
    the backend does, and is then cut to the row. Pins which float32 operation a CUDA-vs-CPU
    difference of the reference comes from."""
    got = {}
    for dev in ("cpu", device):
        case = draw_case(seed, dev, vocabs, max_rows, ulp_groups)
        rows, proc, n, x, alive = _row(case, row, pos)
        top_p = float(rows.top_p[n])
        w, s = _weights(x, alive)
        p = w / s.clamp(min=torch.finfo(torch.float32).tiny)  # (softmax_kept)
        sp = p.sort(dim=1, descending=True).values
        cum = sp.cumsum(1)
        keep_p = top_p_mask(p, alive, rows.top_p) if rows.any_top_p else alive
        keep_m = min_p_mask(x, keep_p, rows.min_p) if rows.any_min_p else keep_p
        u = uniform(rows.seed, rows.position, Stream.SAMPLE)
        tok = inverse_cdf(kept_weights(torch.where(keep_m, x, float("-inf"))), u)
        # the backend's own draw: `sample`'s, from the filtered scores `_row` already made
        backend = inverse_cdf(kept_weights(proc.filtered), u)
        stages = dict(scores=x, top_k_kept=alive, exp_weights=w, weight_sum=s, probs=p,
                      sorted_probs=sp, cumsum=cum, top_p_kept=keep_p, min_p_kept=keep_m, u=u,
                      token=tok, backend_token=backend)
        got[dev] = {k: v[n:n + 1].detach().cpu() for k, v in stages.items()}
    a, b = got["cpu"], got[device]
    print(f"case {seed} row {row} position {pos}: the torch backend on cpu vs {device}")
    for name in a:
        x, y = a[name], b[name]
        same = x == y
        line = f"  {name:13s} " + ("equal" if bool(same.all()) else
                                   f"{int((~same).sum())} of {same.numel()} differ")
        if x.is_floating_point() and not bool(same.all()):
            bits = (x.view(torch.int32).long() - y.view(torch.int32).long()).abs()
            line += f", up to {int(bits.max())} ulps"
        if name in ("token", "backend_token", "weight_sum"):
            line += f" ({x.flatten().tolist()} vs {y.flatten().tolist()})"
        print(line)
    for dev, g in got.items():
        cum = g["cumsum"][0]
        c = int((cum < top_p).sum())
        lo = max(c - 1, 0)
        print(f"  {dev}: top-p {top_p:.9g} crosses at sorted index {c}: cumsum[{lo}..{c + 1}] "
              f"{[f'{v:.9g}' for v in cum[lo:c + 2].tolist()]}, kept "
              f"{int(g['top_p_kept'].sum())}")
    first = (a["cumsum"] != b["cumsum"]).nonzero()
    if len(first):
        i = int(first[0, 1])
        print(f"  the sorted cumsums first part at index {i}: "
              f"{a['cumsum'][0, i].item():.9g} vs {b['cumsum'][0, i].item():.9g} (sorted p "
              f"there equal: {bool(a['sorted_probs'][0, i] == b['sorted_probs'][0, i])})")


def _explain_draw(case: Case, rows: SamplingBatch, proc, row: int, pos: int):
    """Print where the torch backend's inverse-CDF draw of that row and position falls
    (rows and proc: `process_rows` of the case): the drawn token and how far the target
    u * S lies from the nearest token boundary, as a fraction of the drawn token's weight
    and of S. The kernels take the prefix of a target's tile from float32 tile masses (sums
    of the SFU's exp, `triton_backend`), which can move the target by about a float32 ulp of
    S: a draw within two ulps of S of a boundary is a rounding tie of the tile masses, not a
    disagreement about the law. Returns, when a token is drawn there (`sample`, or verify's
    emitted position: the residual after a rejection, the bonus token after all drafts),
    `draw_with(w)`: the token drawn with that row and position's kept weights [V] replaced
    by w (the residual recomputed from them), else None."""
    weights = kept_weights(proc.filtered)
    if case.verify is None:
        n, w, stream, what = row, weights[row], Stream.SAMPLE, "the draw"
        u = uniform(rows.seed[n:n + 1], rows.position[n:n + 1], stream)

        def draw_with(w_new: torch.Tensor) -> int:
            return int(inverse_cdf(w_new[None], u))
    else:
        drafts, probs, num_draft = case.verify
        out = ref.verify(case.logits, drafts, case.batch, probs, num_draft)
        n_acc = out.num_accepted.long()
        if pos != int(n_acc[row]):
            print(f"position {pos} is not the emitted draw ({int(n_acc[row])} drafts accepted)")
            return None
        bsz, k1, vocab = case.logits.shape
        n_draft = (torch.full((bsz,), k1 - 1, device=n_acc.device) if num_draft is None
                   else num_draft.long())
        weights = weights.view(bsz, k1, vocab)

        def law_of(wv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            # (the sums over the whole batch, as `verify` takes them: on CUDA a reduction's
            # rounding depends on the tensor's shape)
            total = wv.sum(-1).clamp(min=torch.finfo(torch.float32).tiny)
            return ref.emitted_law(wv, total, drafts, probs, n_acc, n_draft)

        law, streams = law_of(weights)
        n, w, stream = row * k1 + pos, law[row], Stream(int(streams[row]))
        what = "the residual draw" if stream == Stream.RESIDUAL else "the bonus draw"
        u = uniform(rows.seed[n:n + 1], rows.position[n:n + 1], stream)

        def draw_with(w_new: torch.Tensor) -> int:
            old = weights[row, pos].clone()
            weights[row, pos] = w_new
            try:
                return int(inverse_cdf(law_of(weights)[0][row][None], u))
            finally:
                weights[row, pos] = old
    if float(rows.temperature[n]) == 0:
        print("a greedy row: no draw")
        return None
    cdf = w.double().cumsum(0)
    total = float(cdf[-1])
    if total <= 0:
        print(f"{what}: no positive weight")
        return None
    tok = int(inverse_cdf(w[None], u))
    target = float(u.double() * total)
    above = target - (float(cdf[tok - 1]) if tok > 0 else 0.0)  # (past the lower boundary)
    gap = min(above, float(cdf[tok]) - target)  # (<= 0: rounding found no crossing)
    tie = gap < 2 * float(torch.finfo(torch.float32).eps) * total
    # the token a slightly moved target draws: the nearest positive weight across that boundary
    ids = (w > 0).nonzero().squeeze(1)
    side = ids[ids < tok][-1:] if above == gap else ids[ids > tok][:1]
    across = int(side[0]) if len(side) else None
    print(f"{what}: token {tok}, the target at {above / float(w[tok]):.6f} of its "
          f"weight, {gap / total:.3g} S from a token boundary"
          + (f" (token {across} across it)" if across is not None else "")
          + ("  (within two float32 ulps of S: a rounding tie of the tile masses)"
             if tie else ""))
    return draw_with


def _counted(v) -> torch.Tensor:
    """A verify output's tokens with its accepted and emitted counts after them (CPU)."""
    return torch.cat([v.tokens.long(), v.num_accepted.long()[:, None],
                      v.num_emitted.long()[:, None]], 1).cpu()


def _case(seed: int, device: str, vocabs, max_rows: int, ulp_groups: bool,
          reference_only: bool = False) -> tuple[str, list[str], tuple]:
    """Case `seed` on `device`: (description, differences, (torch's, triton's) token
    tensors (with accepted and emitted counts after them for verify)); with
    reference_only the torch backend's alone (as both)."""
    case = draw_case(seed, device, vocabs, max_rows, ulp_groups)
    logits, batch = case.logits, case.batch
    if case.verify is None:
        a = ref.sample(logits, batch)
        if reference_only:
            return case.desc, [], (a.tokens.cpu(), a.tokens.cpu())
        b = tri.sample(logits, batch)
        out = diff("tokens", a.tokens, b.tokens)
        tokens = (a.tokens.cpu(), b.tokens.cpu())
    else:
        drafts, probs, num_draft = case.verify
        a = ref.verify(logits, drafts, batch, probs, num_draft)
        ta = _counted(a)
        if reference_only:
            return case.desc, [], (ta, ta)
        b = tri.verify(logits, drafts, batch, probs, num_draft)
        out = (diff("tokens", a.tokens, b.tokens) + diff("accepted", a.num_accepted,
                                                         b.num_accepted)
               + diff("emitted", a.num_emitted, b.num_emitted))
        tokens = (ta, _counted(b))
    out += (diff("top_ids", a.top_ids, b.top_ids) + diff("logprobs", a.logprobs, b.logprobs, 1e-4)
            + diff("top_logprobs", a.top_logprobs, b.top_logprobs, 1e-4))
    return case.desc, out, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--count", type=int, help="stop after this many cases (a CI test)")
    ap.add_argument("--start", type=int, default=0, help="the first case seed")
    ap.add_argument("--case", type=int, help="repeat one case seed and print its rows")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cmax", type=int, help="candidates a row (triton_backend.CMAX): a small "
                    "list sends most filtered rows down the exact paths")
    ap.add_argument("--vocabs", type=int, nargs="+", help="vocabularies to draw from (default: "
                    f"{CPU_VOCABS} on the CPU, {GPU_VOCABS} on a GPU)")
    ap.add_argument("--rows", type=int, default=8, help="at most this many requests a batch "
                    "(on a GPU, 32 or more with V > 131072 runs the call in two halves)")
    ap.add_argument("--explain", type=int, nargs=2, metavar=("ROW", "POS"),
                    help="with --case: the torch backend's top-p crossing of that row and "
                    "position (on --device), whether a few ulps of its normaliser move it, "
                    "and the draws of the kept sets a rounding can give")
    ap.add_argument("--stages", type=int, nargs=2, metavar=("ROW", "POS"),
                    help="with --case and --device cuda: where the torch backend on that "
                    "device and on the CPU part, stage by stage, for that row and position")
    ap.add_argument("--ulp-groups", action="store_true", help="in half the cases, a tenth to "
                    "a half of the ids one float32 ulp apart below a max of 1 (ties in "
                    "probability among distinct logits)")
    args = ap.parse_args()
    if args.cmax:
        tri.CMAX = args.cmax
    vocabs = args.vocabs or (GPU_VOCABS if args.device != "cpu" else CPU_VOCABS)
    if args.case is not None and args.explain:
        explain(args.case, args.device, vocabs, args.rows, args.ulp_groups, *args.explain)
        return
    if args.case is not None and args.stages:
        compare_stages(args.case, args.device, vocabs, args.rows, args.ulp_groups, *args.stages)
        return
    if args.case is not None:
        desc, out = run_case(args.case, args.device, args.vocabs, args.rows, args.ulp_groups)
        print(desc, out or "equal")
        return
    end = time.monotonic() + 60 * args.minutes
    seed, failed = args.start, 0
    while time.monotonic() < end and (args.count is None or seed - args.start < args.count):
        t0 = time.monotonic()
        desc, out = run_case(seed, args.device, args.vocabs, args.rows, args.ulp_groups)
        status = "equal" if not out else "DIFFERS"
        print(f"case {seed}: {desc}: {status} ({time.monotonic() - t0:.1f} s)", flush=True)
        for line in out:
            print(f"    {line}", flush=True)
        failed += bool(out)
        seed += 1
    print(f"{seed - args.start} cases, {failed} differ")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
