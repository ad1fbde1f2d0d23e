"""Shared fixtures: the embedded model (loaded once per session) and tiny random models."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `pytest -m gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def embedded():
    """SmolLM2-135M-Instruct (fp32, CPU), converted once and cached by models.loader."""
    from models.loader import load_model

    return load_model("embedded:smollm2-135m", device="cpu", dtype=torch.float32)


TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def tiny_hf_model(arch: str, seed: int = 0, **overrides):
    """A small random-weight transformers model of ``arch`` (no download)."""
    import transformers as tf

    kwargs = {**TINY, **overrides}
    if arch == "llama":
        cfg = tf.LlamaConfig(**kwargs)
    elif arch == "mistral":
        cfg = tf.MistralConfig(sliding_window=kwargs.pop("sliding_window", 8), **kwargs)
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(**kwargs)
    elif arch == "qwen3":
        cfg = tf.Qwen3Config(head_dim=16, **kwargs)
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():  # larger weights than the init so that logits are not flat
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.15)
            elif name.endswith("bias"):
                p.normal_(0, 0.1)  # q/k/v biases (Qwen2): make them matter
            else:
                p.uniform_(0.8, 1.2)  # norm weights
    return model
