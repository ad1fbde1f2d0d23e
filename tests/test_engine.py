"""The speculative engine: exact output (greedy token for token, stochastic in law), mixed
batches of every setting, cancellation and preemption without leaks."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from scipy import stats

from deploy.local_engine import build_engine
from models.loader import LoadedModel
from sampler import SamplingParams
from scheduler import Request
from scheduler.engine import Engine
from tests.conftest import tiny_hf_model

FALSE_ALARM = 1e-4


def word_tokenizer(vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, "w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def tiny_loaded(seed: int = 0, vocab: int = 97) -> LoadedModel:
    return LoadedModel(tiny_hf_model("llama", seed=seed, vocab_size=vocab), word_tokenizer(vocab),
                       f"tiny-{seed}", 0.0)


def tiny_draft_dir(tmp_path, seed: int, vocab: int) -> str:
    loaded = tiny_loaded(seed, vocab)
    loaded.model.save_pretrained(tmp_path)
    loaded.tokenizer.save_pretrained(tmp_path)
    return str(tmp_path)


def run(engine: Engine, requests: list[Request], cancel: dict[str, int] | None = None,
        max_steps: int = 100_000) -> dict[str, Request]:
    """Add the requests, step until done (aborting cancel[id] after that many steps)."""
    for r in requests:
        engine.add(r)
    for step in range(max_steps):
        if not engine.has_work():
            break
        for rid, at in (cancel or {}).items():
            if at == step:
                engine.abort(rid)
        engine.step()
    assert not engine.has_work()
    return {r.request_id: r for r in requests}


def target_only_greedy(engine_factory, prompts, n):
    eng = engine_factory(draft=None)
    reqs = [Request(f"t{i}", p, SamplingParams(temperature=0.0), max_tokens=n)
            for i, p in enumerate(prompts)]
    return [r.output_ids for r in run(eng, reqs).values()]


def assert_no_leaks(engine: Engine) -> None:
    sched = engine.scheduler
    assert sched.num_free_slots == sched.config.max_slots and sched.kv_used == 0
    target = engine.target
    assert not target.seqs and not any(target.runner.active)  # type: ignore[attr-defined]
    draft = engine.draft
    if draft is not None:
        assert not draft.seqs and not draft.cached  # type: ignore[attr-defined]
        if draft.runner is not None:  # type: ignore[attr-defined]
            assert not any(draft.runner.active)  # type: ignore[attr-defined]
    assert not engine.draft_seen and not engine.seeds


@pytest.fixture(scope="module")
def embedded_engine_factory(embedded):
    def make(draft="quant:int8", **kw):
        kw.setdefault("max_slots", 8)
        kw.setdefault("max_seq_len", 160)
        return build_engine(embedded, draft, backend="torch", **kw)
    return make


PROMPTS = ["The capital of France is", "def fibonacci(n):",
           "Once upon a time, in a land far, far away, there lived a", "1, 2, 3,",
           "The three primary colours are", "import numpy as np\n\nx = np.",
           "Translate to French: good morning", "Q: What is 12 times 12?\nA:"]


@pytest.mark.parametrize("batch", [1, 8])
def test_greedy_speculative_equals_target_only(embedded, embedded_engine_factory, batch):
    tok = embedded.tokenizer
    prompts = [tok(p).input_ids for p in PROMPTS[:batch]]
    n = 24
    expected = target_only_greedy(embedded_engine_factory, prompts, n)
    # mixed k_i: requests cap their own speculation length at 0..4
    eng = embedded_engine_factory(k_max=4, adaptive=False)
    reqs = [Request(f"r{i}", p, SamplingParams(temperature=0.0), max_tokens=n,
                    num_speculative_tokens=[4, 0, 2, 3, 1, 4, 2, 4][i])
            for i, p in enumerate(prompts)]
    got = run(eng, reqs)
    assert [r.output_ids for r in got.values()] == expected
    stats_ = eng.scheduler.stats()
    assert stats_.drafted_tokens > 0 and stats_.accepted_tokens > 0  # it did speculate
    assert_no_leaks(eng)


def analytic_three_token_law(hf, prompt, vocab, temperature):
    """P(t1, t2, t3 | prompt) by enumeration with the target model alone (float64)."""
    law = np.zeros((vocab,) * 3)
    with torch.no_grad():
        def probs(seq):
            logits = hf(torch.tensor([seq])).logits[0, -1].double()
            return torch.softmax(logits / temperature, -1).numpy()
        p1 = probs(prompt)
        for a in range(vocab):
            p2 = probs(prompt + [a])
            for b in range(vocab):
                law[a, b] = p1[a] * p2[b] * probs(prompt + [a, b])
    return law.reshape(-1)


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    n = counts.sum()
    expected = probs * n
    assert counts[expected == 0].sum() == 0, "drew a token of probability 0"
    order = np.argsort(expected)
    small = order[np.cumsum(expected[order]) < 5 * 5]  # pool the rarest cells
    keep = np.setdiff1d(np.arange(len(probs)), small)
    obs = np.append(counts[keep], counts[small].sum())
    exp = np.append(expected[keep], expected[small].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.slow
def test_stochastic_speculative_output_has_the_target_law(tmp_path):
    """First three tokens (the 2nd and 3rd come from one verify step with k=2) under
    speculative decoding with a different random draft, vs the target's enumerated law."""
    vocab, temperature, draws = 8, 0.9, 24_000
    target = tiny_loaded(seed=1, vocab=vocab)
    draft_dir = tiny_draft_dir(tmp_path, seed=2, vocab=vocab)
    prompt = [3, 1, 4]
    law = analytic_three_token_law(target.model, prompt, vocab, temperature)
    eng = build_engine(target, draft_dir, max_slots=64, max_seq_len=8, k_max=2,
                       adaptive=False, backend="torch")
    params = SamplingParams(temperature=temperature)
    reqs = [Request(f"r{i}", prompt, params, max_tokens=3) for i in range(draws)]
    done = run(eng, reqs)
    cells = np.array([a * 64 + b * 8 + c for a, b, c in (r.output_ids for r in done.values())])
    counts = np.bincount(cells, minlength=vocab ** 3)
    st = eng.scheduler.stats()
    assert 0.05 < st.accepted_tokens / st.drafted_tokens < 0.95  # drafts really tested
    assert chi_square_pvalue(counts, law) > FALSE_ALARM
    # and a wrong law (temperature 1.0 instead of 0.9) is rejected by the same test
    wrong = analytic_three_token_law(target.model, prompt, vocab, 1.0)
    assert chi_square_pvalue(counts, wrong) < FALSE_ALARM
    assert_no_leaks(eng)


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.mark.slow
def test_mixed_batch_of_sixteen(embedded, embedded_engine_factory):
    tok = embedded.tokenizer
    settings = [
        dict(temperature=0.0), dict(temperature=0.7, seed=11), dict(temperature=1.0, top_k=5),
        dict(temperature=1.0, top_p=0.8), dict(temperature=1.0, min_p=0.2),
        dict(temperature=0.8, repetition_penalty=1.3, frequency_penalty=0.5,
             presence_penalty=0.5),
        dict(temperature=0.0, logit_bias={tok.encode(" Paris")[0]: -100.0}),
        dict(temperature=0.0, json_schema=SCHEMA), dict(temperature=0.9, json_schema=SCHEMA),
        dict(temperature=0.0), dict(temperature=0.7, seed=12), dict(temperature=1.0, top_k=50),
        dict(temperature=0.5, top_p=0.9, min_p=0.05), dict(temperature=0.0, logprobs=3),
        dict(temperature=1.2, seed=13), dict(temperature=0.0, repetition_penalty=1.2),
    ]
    json_prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Give a JSON object with a name and an age."}],
        add_generation_prompt=True, tokenize=False)
    reqs = []
    for i, s in enumerate(settings):
        text = json_prompt if "json_schema" in s else PROMPTS[i % len(PROMPTS)]
        grammar = "json_schema" in s
        reqs.append(Request(f"r{i}", tok(text, add_special_tokens=False).input_ids,
                            SamplingParams(**s), max_tokens=48 if grammar else 20,
                            num_speculative_tokens=0 if i % 4 == 3 else 4,
                            eos_token_ids=(tok.eos_token_id,)))
    eng = embedded_engine_factory(max_slots=16, max_seq_len=160, k_max=4, adaptive=False)
    done = run(eng, reqs)
    for r in done.values():
        assert r.status.value == "finished", (r.request_id, r.finish_reason)
    for i in (7, 8):  # grammar rows: complete JSON that validates
        obj = json.loads(tok.decode(done[f"r{i}"].output_ids, skip_special_tokens=True))
        assert set(obj) == {"name", "age"} and isinstance(obj["age"], int)
    assert tok.encode(" Paris")[0] not in done["r6"].output_ids
    assert eng.outputs["r13"].logprobs and len(eng.outputs["r13"].logprobs[0].top) == 3
    # the seeded request gives the same tokens alone
    alone = embedded_engine_factory(max_slots=16, max_seq_len=160, k_max=4, adaptive=False)
    again = Request("again", list(reqs[1].prompt_ids), SamplingParams(**settings[1]),
                    max_tokens=20, num_speculative_tokens=4, eos_token_ids=(tok.eos_token_id,))
    assert run(alone, [again])["again"].output_ids == done["r1"].output_ids
    assert_no_leaks(eng)


def test_random_cancellations_leave_no_leak(tmp_path):
    target = tiny_loaded(seed=3)
    eng = build_engine(target, tiny_draft_dir(tmp_path, 4, 97), max_slots=8, max_seq_len=48,
                       k_max=3, backend="torch")
    rng = random.Random(0)
    reqs, cancel = [], {}
    for i in range(200):
        prompt = [rng.randrange(97) for _ in range(rng.randint(1, 12))]
        params = SamplingParams(temperature=rng.choice([0.0, 0.8]), seed=i)
        reqs.append(Request(f"r{i}", prompt, params, max_tokens=rng.randint(1, 20)))
        if rng.random() < 0.3:
            cancel[f"r{i}"] = rng.randint(0, 60)
    done = run(eng, reqs, cancel)
    statuses = {r.status.value for r in done.values()}
    assert statuses <= {"finished", "aborted"} and "aborted" in statuses
    for r in done.values():
        if r.status.value == "finished":
            assert len(r.output_ids) == r.max_tokens
    assert_no_leaks(eng)


def test_preemption_under_small_kv_gives_complete_correct_outputs(tmp_path):
    target = tiny_loaded(seed=5)
    draft = tiny_draft_dir(tmp_path, 6, 97)
    rng = random.Random(1)
    prompts = [[rng.randrange(97) for _ in range(rng.randint(2, 10))] for _ in range(12)]

    def outputs(**kw):
        eng = build_engine(target, draft, max_slots=6, max_seq_len=40, k_max=3,
                           backend="torch", **kw)
        reqs = [Request(f"r{i}", p, SamplingParams(temperature=0.0), max_tokens=24)
                for i, p in enumerate(prompts)]
        done = run(eng, reqs)
        assert_no_leaks(eng)
        return [r.output_ids for r in done.values()], eng.scheduler.stats().num_preemptions

    roomy, none = outputs()
    tight, preempted = outputs(kv_capacity_tokens=100)
    assert none == 0 and preempted > 0
    assert tight == roomy and all(len(o) == 24 for o in tight)


class _FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _FakeTarget:
    """Accepts every draft; each verify costs 10 clock units."""

    def __init__(self, clock: _FakeClock) -> None:
        self.clock = clock

    def prefill(self, items):
        from scheduler.engine import Emitted

        return [Emitted((1,)) for _ in items]

    def verify(self, items):
        from scheduler.engine import Emitted

        self.clock.now += 10.0
        return [Emitted(tuple(it.draft_tokens) + (2,), len(it.draft_tokens)) for it in items]

    def free(self, slots) -> None:
        pass


class _FakeDraft:
    """Each draft step costs 3 clock units (so the true cost ratio is 0.3)."""

    def __init__(self, clock: _FakeClock) -> None:
        self.clock = clock

    def propose(self, items):
        self.clock.now += 3.0 * max(it.k for it in items)
        return [(3,) * it.k for it in items]

    def free(self, slots) -> None:
        pass


def test_engine_measures_the_draft_cost_ratio_for_the_adaptive_policy():
    from scheduler import Scheduler, SchedulerConfig

    clock = _FakeClock()
    sched = Scheduler(SchedulerConfig(max_slots=2, max_seq_len=64, k_max=4, adaptive=True,
                                      draft_cost_ratio=0.1), lambda ids: "x" * len(ids))
    eng = Engine(sched, _FakeTarget(clock), _FakeDraft(clock), clock=clock)
    run(eng, [Request("a", [1, 2], None, max_tokens=40)])
    assert eng.cost_ratio == pytest.approx(0.3)
    assert sched.settings.draft_cost_ratio == pytest.approx(0.3)
    off = Scheduler(SchedulerConfig(max_slots=2, max_seq_len=64, k_max=4), lambda ids: "")
    fixed = Engine(off, _FakeTarget(clock), _FakeDraft(clock), measure_cost=False, clock=clock)
    run(fixed, [Request("b", [1, 2], None, max_tokens=40)])
    assert fixed.cost_ratio is None and off.settings.draft_cost_ratio == 0.1
