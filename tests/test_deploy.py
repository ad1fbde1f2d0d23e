"""The Serve app end to end: real Ray, real HTTP, the official `openai` client.

One app per module (the fixture starts Ray with 2 CPUs, deploys the CPU demo pair with a
small context, and shuts both down at the end). Outputs are kept short: the target is
SmolLM2-135M on a 2-core CPU.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket

import httpx
import jsonschema
import openai
import pytest

pytestmark = pytest.mark.timeout(600)

MODEL = "embedded:smollm2-135m"
MAX_SEQ_LEN = 256
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "mood": {"enum": ["happy", "sad", "calm"]},
    },
    "required": ["name", "mood"],
    "additionalProperties": False,
}


def _free_port() -> int:
    """A free port below Linux's ephemeral range (32768+) and above Ray's worker ports
    (10002-19999), so that none of the processes Ray starts can take it before Serve's
    proxy binds it (CI saw that race with a port the kernel had handed out)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


@pytest.fixture(scope="module")
def server():
    """Base URL of a running app (target + quant:int8 draft, CPU), torn down afterwards."""
    import ray
    from ray import serve

    from deploy.app import build_app
    from deploy.config import AppArgs

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for attempt in range(3):
            port = _free_port()
            try:
                serve.start(http_options={"host": "127.0.0.1", "port": port})
                break
            except ray.exceptions.RayError:
                # The port was taken between the probe and the proxy's bind: try another.
                serve.shutdown()
                if attempt == 2:
                    raise
        args = AppArgs(target=MODEL, draft="quant:int8", dtype="float32", max_slots=8,
                       max_seq_len=MAX_SEQ_LEN, max_k_max=4, k_max=3,
                       sampler_backend="torch", torch_threads=1)
        serve.run(build_app(args), name="sonicspec", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="none", timeout=120)


def _spec(usage) -> dict:
    return usage.model_extra["speculation"]


def test_models_lists_the_served_model(client) -> None:
    """Property: /v1/models names the model that requests must use."""
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_health(server) -> None:
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}


def test_completion_reports_usage_and_speculation(client) -> None:
    """Property: a greedy completion returns text, exact usage, and drafted >= accepted."""
    out = client.completions.create(model=MODEL, prompt="The capital of France is",
                                    max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
    assert out.choices[0].text.strip()
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 12
    assert out.usage.total_tokens == out.usage.prompt_tokens + 12
    spec = _spec(out.usage)
    assert spec["drafted_tokens"] >= spec["accepted_tokens"] >= 0
    assert spec["decode_steps"] >= 1 and spec["drafted_tokens"] > 0


def test_chat_uses_the_chat_template(client) -> None:
    """Property: chat prompts go through the template (more prompt tokens than the text)."""
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=10,
        temperature=0)
    msg = out.choices[0].message
    assert msg.role == "assistant" and msg.content
    assert out.usage.prompt_tokens > 4  # "Say hello." alone is ~4 tokens


def test_streaming_arrives_incrementally_and_matches_the_whole(client) -> None:
    """Property: a stream yields several content chunks whose concatenation is the
    non-streamed greedy text, then a usage chunk when include_usage is set."""
    kwargs = dict(model=MODEL, messages=[{"role": "user", "content": "Count to ten."}],
                  max_tokens=20, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kwargs).choices[0].message.content
    pieces, usage = [], None
    for chunk in client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
    assert len(pieces) >= 3
    assert "".join(pieces) == whole
    assert usage is not None and usage.completion_tokens == 20


def test_json_schema_output_validates(client) -> None:
    """Property: response_format json_schema constrains the output to valid JSON."""
    out = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Describe a cat as JSON."}],
        max_tokens=60, temperature=0.8, seed=1,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "cat", "schema": SCHEMA}})
    assert out.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(out.choices[0].message.content), SCHEMA)


def test_json_object_starts_an_object(client) -> None:
    """Property: json_object is a generic JSON grammar (the output opens an object)."""
    out = client.completions.create(model=MODEL, prompt="JSON:", max_tokens=8, temperature=0,
                                    extra_body={"response_format": {"type": "json_object"}})
    assert out.choices[0].text.startswith("{")


def test_same_seed_same_text(client) -> None:
    """Property: a seeded sampled request repeats exactly, with speculation and without.
    (The two differ from each other: speculative sampling keeps the target's distribution,
    not the plain sampler's random draws.)"""
    kwargs = dict(model=MODEL, prompt="Once upon a time", max_tokens=16, temperature=1.0,
                  seed=1234)
    a = client.completions.create(**kwargs).choices[0].text
    b = client.completions.create(**kwargs).choices[0].text
    assert a == b
    plain = dict(kwargs, extra_body={"num_speculative_tokens": 0})
    c = client.completions.create(**plain)
    assert c.choices[0].text == client.completions.create(**plain).choices[0].text
    assert _spec(c.usage)["drafted_tokens"] == 0


def test_logprobs_present_when_asked(client) -> None:
    """Property: one logprob (<= 0) per generated token, with the asked number of
    alternatives, in both API shapes."""
    out = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, temperature=0,
                                    logprobs=3, extra_body={"ignore_eos": True})
    lp = out.choices[0].logprobs
    assert len(lp.token_logprobs) == len(lp.tokens) == 6
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(len(t) <= 3 and t for t in lp.top_logprobs)
    assert "".join(lp.tokens) == out.choices[0].text
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens
    assert all(len(c.top_logprobs) == 2 for c in content)
    assert content[0].top_logprobs[0].logprob >= content[0].top_logprobs[1].logprob
    no_lp = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3)
    assert no_lp.choices[0].logprobs is None


def _settings(i: int) -> dict:
    """32 different request settings (sampling, extras, speculation length)."""
    extra = {"ignore_eos": True, "num_speculative_tokens": i % 5, "top_k": [0, 5, 50][i % 3],
             "min_p": [0.0, 0.05][i % 2], "repetition_penalty": [1.0, 1.2][i % 2]}
    return dict(temperature=[0.0, 0.7, 1.0, 1.3][i % 4], top_p=[1.0, 0.9][i % 2],
                seed=i if i % 3 else None, presence_penalty=[0.0, 0.5][i % 2],
                frequency_penalty=[0.0, 0.3][(i // 2) % 2], max_tokens=3 + i % 6,
                extra_body=extra)


def test_32_concurrent_streams_complete_with_correct_usage(server) -> None:
    """Property: 32 concurrent streaming clients with different settings all finish, and
    each one's usage counts what it asked for and what it was sent."""
    aclient = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="none", timeout=300)

    async def one(i: int):
        prompt = [1 + (7 * i + j) % 1000 for j in range(5 + i % 7)]  # token ids
        s = _settings(i)
        stream = await aclient.completions.create(
            model=MODEL, prompt=prompt, stream=True, stream_options={"include_usage": True},
            **s)
        text, usage, finish = "", None, None
        async for chunk in stream:
            usage = chunk.usage or usage
            for c in chunk.choices:
                text += c.text
                finish = c.finish_reason or finish
        return prompt, s, text, usage, finish

    async def run_all():
        try:
            return await asyncio.gather(*(one(i) for i in range(32)))
        finally:
            await aclient.close()

    for prompt, s, _text, usage, finish in asyncio.run(run_all()):
        assert finish == "length"
        assert usage.prompt_tokens == len(prompt)
        assert usage.completion_tokens == s["max_tokens"]
        assert usage.total_tokens == len(prompt) + s["max_tokens"]
        if s["extra_body"]["num_speculative_tokens"] == 0:
            assert _spec(usage)["drafted_tokens"] == 0


BAD = [
    ("unknown model", {"model": "gpt-4"}, "model"),
    ("negative temperature", {"temperature": -1}, "temperature"),
    ("top_p zero", {"top_p": 0}, "top_p"),
    ("max_tokens above context", {"max_tokens": MAX_SEQ_LEN}, "max_tokens"),
    ("out-of-vocab logit_bias", {"logit_bias": {"999999": 5}}, "logit_bias"),
    ("invalid JSON schema", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "string", "minLength": 5, "maxLength": 2}}}},
     "response_format"),
    ("unknown field", {"temprature": 0.5}, "temprature"),
    ("wrong type", {"max_tokens": "many"}, "max_tokens"),
    ("too many speculative tokens", {"num_speculative_tokens": 99},
     "num_speculative_tokens"),
]


@pytest.mark.parametrize("route", ["completions", "chat/completions"])
def test_bad_requests_get_400_naming_the_param(server, route: str) -> None:
    """Property: each bad request gets HTTP 400 with the OpenAI error body naming the
    offending parameter, and the server keeps serving good requests."""
    base = {"model": MODEL, "max_tokens": 4}
    base |= ({"prompt": "Hi"} if route == "completions"
             else {"messages": [{"role": "user", "content": "Hi"}]})
    with httpx.Client(base_url=f"{server}/v1", timeout=120) as http:
        for name, patch, param in BAD:
            r = http.post(f"/{route}", json={**base, **patch})
            assert r.status_code == 400, (name, r.text)
            err = r.json()["error"]
            assert err["param"] == param, (name, err)
            assert err["type"] == "invalid_request_error" and err["message"]
        r = http.post(f"/{route}", content=b'{"model": "x", "prompt": ',
                      headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "body"
        ok = http.post(f"/{route}", json=base)
        assert ok.status_code == 200, ok.text


def test_openai_client_raises_bad_request(client) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=4, temperature=-1)
    assert info.value.body["param"] == "temperature"


def test_reconfigure_changes_k_max_without_restart(server, client) -> None:
    """Property: user_config k_max=0 turns speculation off in the live replica (same
    engine: its step counter keeps growing), and k_max>0 turns it back on."""
    from ray import serve

    engine = serve.get_deployment_handle("LLMEngine", "sonicspec")
    steps_before = httpx.get(f"{server}/stats").json()["steps"]
    try:
        engine.reconfigure.remote({"k_max": 0, "adaptive": False}).result()
        out = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=6,
                                        temperature=0)
        assert _spec(out.usage)["drafted_tokens"] == 0
        stats = httpx.get(f"{server}/stats").json()
        assert stats["knobs"] == {"k_max": 0, "adaptive": False}
        assert stats["steps"] > steps_before
    finally:
        engine.reconfigure.remote({"k_max": 3, "adaptive": True}).result()


def test_hop_times_are_measured(server, client) -> None:
    """Property: /stats reports p50/p99 of the engine -> actor round trips and their Ray
    overhead (round trip minus in-actor compute) for both models."""
    client.completions.create(model=MODEL, prompt="One two three", max_tokens=6, temperature=0)
    hops = httpx.get(f"{server}/stats").json()["hops"]
    for method in ("draft.propose", "target.verify", "target.prefill"):
        h = hops[method]
        assert h["calls"] > 0
        assert 0 < h["hop_p50_ms"] <= h["hop_p99_ms"]
        assert h["hop_p50_ms"] < h["round_trip_p50_ms"]


def test_client_disconnect_aborts_the_request(server) -> None:
    """Property: a streaming client that goes away frees its slot (the engine aborts the
    request instead of generating the remaining tokens)."""
    import time

    def aborted() -> int:
        return httpx.get(f"{server}/stats").json()["engine"]["requests_by_status"].get(
            "aborted", 0)

    before = aborted()
    body = {"model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 200,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server}/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # one chunk, then hang up
    deadline = time.monotonic() + 30
    while aborted() == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert aborted() == before + 1


def test_stop_string_and_logit_bias(client) -> None:
    """Property: a stop string ends the text just before its first occurrence (finish
    "stop"); a +100 logit_bias makes greedy decoding pick that token every time."""
    kwargs = dict(model=MODEL, prompt="The alphabet: a, b, c,", max_tokens=12, temperature=0,
                  extra_body={"ignore_eos": True})
    full = client.completions.create(**kwargs).choices[0].text
    stop = full[4:7]
    cut = client.completions.create(**kwargs, stop=[stop]).choices[0]
    assert cut.finish_reason == "stop" and cut.text == full[:full.index(stop)]
    biased = client.completions.create(**kwargs, logit_bias={"42": 100}, logprobs=0)
    assert len(set(biased.choices[0].logprobs.tokens)) == 1
