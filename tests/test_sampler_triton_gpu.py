"""The Triton backend on a GPU (`pytest -m gpu`): token equality with the torch backend over
the issue's (B, V, dtype) grid, one compilation for every batch size, CUDA-graph replay equals
eager for bucketed batch sizes, no host sync, and the target law (chi-square, false alarm
1e-4, 100k draws per row) for sample and for verify's first emitted token.

Equality is counted, not all-or-nothing: sums are taken in another order than torch's, so a
uniform that lands within float32 rounding of a CDF boundary (or a cumsum within rounding of
top_p) can pick the neighbour. The counts go to $SONICSPEC_GPU_REPORT (JSON) when set.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from test_sampler_helpers import FALSE_ALARM, chi_square_pvalue, processed_law

from sampler import SamplingBatch, SamplingParams
from sampler import torch_backend as ref

pytestmark = pytest.mark.gpu
GRID_B = (1, 7, 64, 256)
GRID_V = (111, 32000, 49152, 128256, 151936, 262144)
REPORT: dict[str, list[int]] = {}


def tri():
    from sampler import triton_backend

    return triton_backend


def mixed(rows: int, vocab: int) -> list[SamplingParams]:
    kinds = [SamplingParams(temperature=0), SamplingParams(temperature=0.8, top_k=50),
             SamplingParams(temperature=0.7, top_p=0.9), SamplingParams(min_p=0.05,
                                                                        repetition_penalty=1.1),
             SamplingParams(top_k=40, top_p=0.95, frequency_penalty=0.3, presence_penalty=0.2,
                            logit_bias={vocab - 1: 5.0}),
             SamplingParams(), SamplingParams(temperature=1.2, top_k=min(vocab, 3000))]
    return [kinds[r % len(kinds)] for r in range(rows)]


def batch_for(rows: int, vocab: int, positions: int, seed: int, params=None) -> SamplingBatch:
    g = torch.Generator().manual_seed(seed)
    hist = torch.randint(0, vocab, (rows, 64), generator=g).tolist()
    mask = torch.full((rows, positions, (vocab + 31) // 32), -1, dtype=torch.int32)
    mask[::4, :, : mask.shape[2] // 2] = 0
    return SamplingBatch.from_requests(params or mixed(rows, vocab), [h[:32] for h in hist],
                                       [h[32:] for h in hist], vocab, device="cuda",
                                       seeds=[seed * 1000 + r for r in range(rows)],
                                       num_positions=positions, grammar_bitmask=mask)


def _count(key: str, a: torch.Tensor, b: torch.Tensor) -> None:
    same = int((a == b).sum())
    tot = REPORT.setdefault(key, [0, 0])
    tot[0] += same
    tot[1] += a.numel()


@pytest.fixture(scope="module", autouse=True)
def write_report():
    yield
    path = os.environ.get("SONICSPEC_GPU_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(REPORT, f, indent=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", GRID_V)
def test_grid_tokens_equal_torch(vocab: int, dtype: torch.dtype) -> None:
    """Property: seeded sample and verify (K=3, dense drafts) tokens equal the torch backend's
    up to rounding ties: at most max(2, 0.1%) differ per (V, dtype) cell (the exact counts go
    to the report; the whole grid is expected at >= 99.99%)."""
    k = 3
    key = f"V={vocab} {str(dtype)[6:]}"
    for rows in GRID_B:
        for seed in (1, 2):
            g = torch.Generator(device="cuda").manual_seed(seed * 7 + rows)
            logits = (torch.randn(rows, k + 1, vocab, device="cuda", generator=g) * 4).to(dtype)
            sb = batch_for(rows, vocab, 1, seed)
            first = logits[:, 0].contiguous()
            _count("sample " + key, ref.sample(first, sb).tokens, tri().sample(first, sb).tokens)
            vb = batch_for(rows, vocab, k + 1, seed + 10)
            q = torch.softmax(torch.randn(rows, k, vocab, device="cuda", generator=g) * 3, -1)
            drafts = torch.multinomial(q.view(-1, vocab), 1, generator=g).view(rows, k)
            a = ref.verify(logits, drafts, vb, q)
            b = tri().verify(logits, drafts, vb, q)
            _count("verify " + key, a.tokens, b.tokens)
    for name in ("sample " + key, "verify " + key):
        same, total = REPORT[name]
        assert same >= total - max(2, total // 1000), (name, same, total)


def _cache_sizes() -> dict[str, int]:
    from sampler import triton_kernels as tk

    sizes = {}
    for name in dir(tk):
        fn = getattr(tk, name)
        if name.endswith("_kernel") and hasattr(fn, "device_caches"):
            sizes[name] = sum(len(c[0]) for c in fn.device_caches.values())
    return sizes


def test_one_compilation_serves_every_batch_size() -> None:
    """Property: the batch size is no constexpr: after B=7 compiled everything, B=1, 64 and
    256 compile nothing new."""
    vocab, k = 32000, 2
    params = [SamplingParams(temperature=0.9, top_k=30, top_p=0.9, min_p=0.01,
                             repetition_penalty=1.2, logit_bias={5: 1.0})]

    def step(rows: int) -> None:
        logits = torch.randn(rows, k + 1, vocab, device="cuda")
        tri().sample(logits[:, 0].contiguous(), batch_for(rows, vocab, 1, 3, params * rows))
        tri().verify(logits, logits[:, :k].argmax(-1), batch_for(rows, vocab, k + 1, 3,
                                                                  params * rows))

    step(7)
    torch.cuda.synchronize()
    before = _cache_sizes()
    assert sum(before.values()) > 0
    for rows in (1, 64, 256):
        step(rows)
    torch.cuda.synchronize()
    assert _cache_sizes() == before


@pytest.mark.parametrize("rows", [1, 8, 64])
def test_graph_replay_equals_eager(rows: int) -> None:
    """Property: `sample` and `verify` captured in a CUDA graph for a bucketed batch size give
    the eager tokens, also after the inputs are refilled in place."""
    vocab, k = 49152, 3
    sb = batch_for(rows, vocab, 1, 5)
    vb = batch_for(rows, vocab, k + 1, 6)
    logits = torch.randn(rows, k + 1, vocab, device="cuda") * 4
    first = logits[:, 0].contiguous()
    drafts = logits[:, :k].argmax(-1)
    drafts[::2, 1] = 7

    def step():
        return tri().sample(first, sb).tokens, tri().verify(logits, drafts, vb).tokens

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(2):
        logits.copy_(torch.randn_like(logits) * 4)
        first.copy_(logits[:, 0])
        sb.position.add_(1)
        vb.position.add_(5)
        graph.replay()
        eager = step()
        assert torch.equal(out[0], eager[0]) and torch.equal(out[1], eager[1])


def test_no_host_sync_in_a_step() -> None:
    """Property: one sample and one verify step run under sync debug mode 'error'."""
    vocab, k, rows = 32000, 3, 16
    sb, vb = batch_for(rows, vocab, 1, 8), batch_for(rows, vocab, k + 1, 9)
    logits = torch.randn(rows, k + 1, vocab, device="cuda")
    first = logits[:, 0].contiguous()
    drafts = logits[:, :k].argmax(-1)
    q = torch.softmax(logits[:, :k], -1)
    tri().sample(first, sb)
    tri().verify(logits, drafts, vb, q)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tri().sample(first, sb)
        tri().verify(logits, drafts, vb, q)
    finally:
        torch.cuda.set_sync_debug_mode(0)


STAT_SETTINGS = [SamplingParams(temperature=0.7), SamplingParams(top_k=7),
                 SamplingParams(top_p=0.6), SamplingParams(min_p=0.05),
                 SamplingParams(repetition_penalty=1.7, frequency_penalty=0.9,
                                presence_penalty=-1.5, logit_bias={0: 4.0, 63: 2.5}),
                 SamplingParams(temperature=0.9, top_k=20, top_p=0.85, min_p=0.02,
                                repetition_penalty=1.3, logit_bias={4: 3.0})]


def test_sample_law_chi_square() -> None:
    """Property: 100k draws per row of a batch whose rows differ follow the analytic law."""
    vocab, draws = 64, 100_000
    prompt, output = [1, 2, 3, 5, 8], [8, 8, 13, 21, 2]
    logits = torch.randn(vocab, generator=torch.Generator().manual_seed(4)) * 2
    rows = len(STAT_SETTINGS)
    base = SamplingBatch.from_requests(STAT_SETTINGS, [prompt] * rows, [output] * rows, vocab,
                                       seeds=list(range(rows)), device="cuda")
    index = torch.arange(rows, device="cuda").repeat_interleave(draws)
    pos = torch.arange(draws, device="cuda").repeat(rows)
    toks = tri().sample(logits.cuda().expand(rows * draws, vocab).contiguous(),
                        base.select(index, positions=pos)).tokens.view(rows, draws).cpu()
    for r, p in enumerate(STAT_SETTINGS):
        law = processed_law(logits, p, prompt, output)
        assert chi_square_pvalue(toks[r].numpy(), law) > FALSE_ALARM, p


def test_verify_first_token_law_chi_square() -> None:
    """Property: verify's first emitted token with dense random drafts follows p (top-p row)."""
    vocab, draws, k = 64, 100_000, 2
    p_logits = torch.randn(vocab, generator=torch.Generator().manual_seed(5)) * 1.5
    q = torch.softmax(torch.randn(vocab, generator=torch.Generator().manual_seed(6)), 0)
    params = SamplingParams(top_p=0.8)
    base = SamplingBatch.from_requests([params], [[]], [[]], vocab, seeds=[3],
                                       num_positions=k + 1, device="cuda")
    pos0 = torch.arange(draws, device="cuda") * (k + 1)
    batch = base.select(torch.zeros(draws, dtype=torch.int64, device="cuda"), positions=pos0)
    qc = q.cuda()
    drafts = torch.multinomial(qc.expand(draws, vocab), k, replacement=True)
    out = tri().verify(p_logits.cuda().expand(draws, k + 1, vocab).contiguous(), drafts, batch,
                       qc.expand(draws, k, vocab).contiguous())
    first = out.tokens[:, 0].cpu().numpy()
    law = processed_law(p_logits, params)
    assert chi_square_pvalue(first, law) > FALSE_ALARM
    acc = np.minimum(law, q.numpy()).sum()
    rate = float((out.num_accepted > 0).float().mean())
    assert abs(rate - acc) < 5 * np.sqrt(acc * (1 - acc) / draws), (rate, acc)
