"""GPU: captured CUDA graphs of runner steps replay to the same logits as eager steps, for
every bucket and for decode (T=1) and verification (T=k+1), without host syncs."""

from __future__ import annotations

import pytest
import torch

from models.cuda_graph import GraphRunner
from models.runner import ModelRunner
from models.transformer import from_hf
from tests.conftest import tiny_hf_model

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_replay_equals_eager(arch, dtype):
    lm = from_hf(tiny_hf_model(arch).to("cuda", dtype))
    eager = ModelRunner(lm, max_slots=8, max_seq_len=128)
    graphed = ModelRunner(lm, max_slots=8, max_seq_len=128)
    GraphRunner(graphed, tokens_per_row=(1, 5))
    gen = torch.Generator().manual_seed(0)
    for batch in (1, 3, 8):
        slots = list(range(batch))
        prompts = [torch.randint(0, 97, (4 + 3 * i,), generator=gen).tolist() for i in slots]
        assert torch.equal(eager.prefill(slots, prompts), graphed.prefill(slots, prompts))
        for t in (1, 5, 1, 5):
            tokens = torch.randint(0, 97, (batch, t), generator=gen)
            a, b = eager.forward(slots, tokens), graphed.forward(slots, tokens)
            assert (a.float() - b.float()).abs().max().item() <= 1e-5
            if t == 5:  # verification step: keep 2 of the 5, as a speculative step would
                lengths = [eager.length(s) - 3 for s in slots]
                eager.rollback(slots, lengths)
                graphed.rollback(slots, lengths)
        for s in slots:
            eager.free(s)
            graphed.free(s)


def test_graphed_decode_step_does_not_sync_the_host():
    lm = from_hf(tiny_hf_model("llama").to("cuda"))
    runner = ModelRunner(lm, max_slots=4, max_seq_len=64)
    GraphRunner(runner, tokens_per_row=(1,))
    runner.prefill([0, 1, 2], [[1, 2, 3], [4, 5], [6]])
    tokens = torch.tensor([[7], [8], [9]])
    runner.forward([0, 1, 2], tokens)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        logits = runner.forward([0, 1, 2], tokens)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert logits.shape == (3, 1, 97) and logits.is_cuda
