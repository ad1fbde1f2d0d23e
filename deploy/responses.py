"""OpenAI response bodies for one request: whole JSON, or SSE chunks, from engine items.

Kept apart from ``deploy/api.py`` so the ingress class (pickled by Serve) refers to this
module by name.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse

from deploy.protocol import ApiError


def unpack_error(item: dict[str, Any]) -> dict[str, Any]:
    e = item["error"]["error"]
    return {"message": e["message"], "param": e["param"], "status": item["status"],
            "code": e["code"]}


class Format:
    """OpenAI response objects for one request (completion or chat, chunk or whole)."""

    def __init__(self, model: str, chat: bool, prompt_tokens: int):
        self.model, self.chat, self.prompt_tokens = model, chat, prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.offset = 0  # text offset, for completion logprobs

    def envelope(self, chunk: bool) -> dict[str, Any]:
        obj = "chat.completion" if self.chat else "text_completion"
        return {"id": self.id, "object": obj + (".chunk" if chunk and self.chat else ""),
                "created": self.created, "model": self.model}

    def choice(self, text: str, finish: str | None, logprobs: list | None,
               chunk: bool) -> dict[str, Any]:
        lp = None if logprobs is None else self.logprobs(logprobs)
        if not self.chat:
            return {"index": 0, "text": text, "logprobs": lp, "finish_reason": finish}
        key = "delta" if chunk else "message"
        msg = {"content": text} if chunk else {"role": "assistant", "content": text}
        return {"index": 0, key: msg, "logprobs": lp, "finish_reason": finish}

    def logprobs(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        if self.chat:
            entry = lambda t, v: {"token": t, "logprob": v, "bytes": list(t.encode())}  # noqa
            return {"content": [{**entry(r["token"], r["logprob"]),
                                 "top_logprobs": [entry(t, v) for t, v in r["top"]]}
                                for r in rows]}
        offsets = []
        for r in rows:
            offsets.append(self.offset)
            self.offset += len(r["token"])
        return {"tokens": [r["token"] for r in rows],
                "token_logprobs": [r["logprob"] for r in rows],
                "top_logprobs": [dict(r["top"]) for r in rows], "text_offset": offsets}

    @staticmethod
    def usage(u: dict[str, Any]) -> dict[str, Any]:
        done = u["completion_tokens"]
        steps = u["decode_steps"]
        spec = {"drafted_tokens": u["drafted_tokens"], "accepted_tokens": u["accepted_tokens"],
                "decode_steps": steps,
                "mean_acceptance_length": (u["accepted_tokens"] + steps) / steps if steps else 0}
        return {"prompt_tokens": u["prompt_tokens"], "completion_tokens": done,
                "total_tokens": u["prompt_tokens"] + done, "speculation": spec}


async def collect(gen, fmt: Format) -> JSONResponse:
    text: list[str] = []
    logprobs: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    async for item in gen:
        text.append(item["text"])
        logprobs.extend(item.get("logprobs") or [])
        last = item
    if last.get("error"):
        raise ApiError(last["error"], None, status=500, kind="server_error")
    lp = logprobs if "logprobs" in last else None
    body = {**fmt.envelope(chunk=False),
            "choices": [fmt.choice("".join(text), last.get("finish_reason"), lp, chunk=False)],
            "usage": fmt.usage(last["usage"])}
    return JSONResponse(body)


async def sse(gen, fmt: Format, include_usage: bool) -> AsyncIterator[str]:
    def event(obj: dict[str, Any]) -> str:
        return f"data: {json.dumps(obj)}\n\n"

    if fmt.chat:
        first = fmt.choice("", None, None, chunk=True)
        first["delta"]["role"] = "assistant"
        yield event({**fmt.envelope(chunk=True), "choices": [first]})
    try:
        async for chunk in _chunks(gen, fmt, include_usage):
            yield event(chunk)
    finally:
        gen.cancel()  # a client that went away aborts its request
    yield "data: [DONE]\n\n"


async def _chunks(gen, fmt: Format, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
    async for item in gen:
        if item.get("error"):
            yield {"error": {"message": item["error"], "type": "server_error", "param": None,
                             "code": None}}
            break
        if item["text"] or item.get("finish_reason") or item.get("logprobs"):
            choice = fmt.choice(item["text"], item.get("finish_reason"), item.get("logprobs"),
                                chunk=True)
            yield {**fmt.envelope(chunk=True), "choices": [choice]}
        if "usage" in item and include_usage:
            yield {**fmt.envelope(chunk=True), "choices": [], "usage": fmt.usage(item["usage"])}
