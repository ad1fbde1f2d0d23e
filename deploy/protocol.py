"""The OpenAI request bodies (pydantic, unknown fields rejected), the ingress -> engine
message, and the OpenAI error body.

Validation happens in two places: here everything that needs no model (types, ranges via
``SamplingParams``, unsupported options); in the engine what needs the tokenizer (context
length, vocabulary ids, grammar compilation). Both raise ``ApiError`` naming the parameter.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sampler.params import SamplingParams

GENERIC_JSON = {"type": "object"}  # response_format json_object: any JSON object


class ApiError(Exception):
    """An OpenAI error: ``{"error": {"message", "type", "param", "code"}}`` with a status."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status
        self.code, self.kind = code, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Body):
    include_usage: bool = False


class JsonSchema(_Body):
    name: str = "schema"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None


class _Common(_Body):
    """Fields shared by /v1/completions and /v1/chat/completions (extras after the line)."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    response_format: ResponseFormat | None = None
    # -- extras (vLLM names)
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    num_speculative_tokens: int | None = Field(None, ge=0)
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False


class CompletionBody(_Common):
    prompt: str | list[int] | list[str]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


class ChatBody(_Common):
    messages: list[dict[str, Any]] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=1)


@dataclass(frozen=True)
class GenerateRequest:
    """What the ingress sends the engine: one prompt (text, ids or chat messages) + settings.

    logprobs: None (off) or the number of top alternatives to report per token.
    """

    prompt: str | list[int] | list[dict[str, Any]]
    sampling: SamplingParams
    max_tokens: int | None = None
    default_max_tokens: int | None = 16  # None: the rest of the context
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    num_speculative_tokens: int | None = None
    logprobs: int | None = None
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def is_chat(self) -> bool:
        return isinstance(self.prompt, list) and bool(self.prompt) and isinstance(
            self.prompt[0], dict)


def parse_body(raw: bytes, kind: type[_Common]) -> _Common:
    """Malformed JSON and schema violations -> ApiError naming the offending field."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(f"request body is not valid JSON: {err}", "body") from None
    if not isinstance(data, dict):
        raise ApiError("request body must be a JSON object", "body")
    try:
        return kind.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = [str(x) for x in first["loc"]]
        param = loc[0] if loc else None
        if first["type"] == "extra_forbidden":
            raise ApiError(f"unknown parameter {'.'.join(loc)!r}", param) from None
        raise ApiError(f"{'.'.join(loc)}: {first['msg']}", param) from None


_API_NAME = {"json_schema": "response_format", "regex": "response_format",
             "ebnf": "response_format", "grammar": "response_format"}


def sampling_params(body: _Common, logprobs: int | None) -> SamplingParams:
    """The body's sampling settings as SamplingParams; ValueError -> ApiError(param)."""
    given = {name: getattr(body, name) for name in (
        "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty",
        "presence_penalty", "seed")}
    kwargs: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if body.logit_bias:
        try:
            kwargs["logit_bias"] = {int(k): v for k, v in body.logit_bias.items()}
        except ValueError:
            raise ApiError("logit_bias keys must be token ids (integers)", "logit_bias") from None
    schema = _schema(body.response_format)
    if schema is not None:
        kwargs["json_schema"] = schema
    if logprobs is not None:
        kwargs["logprobs"] = max(1, logprobs)  # the chosen token's logprob needs >= 1
    try:
        return SamplingParams(**kwargs)
    except ValueError as err:
        name = re.match(r"[a-z_]+", str(err))
        param = name.group() if name else None
        raise ApiError(str(err), _API_NAME.get(param or "", param)) from None


def _schema(fmt: ResponseFormat | None) -> dict[str, Any] | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return GENERIC_JSON
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise ApiError("response_format json_schema needs json_schema.schema", "response_format")
    return fmt.json_schema.schema_


def generate_request(body: _Common) -> GenerateRequest:
    """An OpenAI body (already parsed) -> the engine's request; ApiError on bad settings."""
    if body.n != 1:
        raise ApiError("only n=1 is supported", "n")
    if isinstance(body, CompletionBody):
        if body.echo or body.suffix or (body.best_of or 1) != 1:
            raise ApiError("echo, suffix and best_of are not supported", "echo")
        prompt: Any = body.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            if len(prompt) != 1:
                raise ApiError("only one prompt per request is supported", "prompt")
            prompt = prompt[0]
        logprobs, max_tokens, default = body.logprobs, body.max_tokens, 16
    else:
        assert isinstance(body, ChatBody)
        prompt = body.messages
        logprobs = (body.top_logprobs or 0) if body.logprobs else None
        max_tokens, default = body.max_completion_tokens or body.max_tokens, None
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    if any(not s for s in stop):
        raise ApiError("stop strings must not be empty", "stop")
    return GenerateRequest(
        prompt=prompt, sampling=sampling_params(body, logprobs), max_tokens=max_tokens,
        default_max_tokens=default, stop=stop, stop_token_ids=tuple(body.stop_token_ids or ()),
        ignore_eos=body.ignore_eos, num_speculative_tokens=body.num_speculative_tokens,
        logprobs=logprobs)
