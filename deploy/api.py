"""The HTTP ingress: OpenAI-compatible routes over the engine deployment (FastAPI).

(No `from __future__ import annotations` here: FastAPI must see the real `Request` type
through Serve's ingress wrapper.)

Routes: POST /v1/completions, POST /v1/chat/completions (SSE when ``stream``), GET /v1/models,
GET /health, GET /stats (engine counters and the engine <-> actor hop times; extra).
Bad requests get HTTP 400 with the OpenAI error body naming ``param``.
"""


import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from deploy import responses
from deploy.config import AppArgs
from deploy.protocol import ApiError, ChatBody, CompletionBody, generate_request, parse_body

app = FastAPI(title="SonicSpec", version="0.1.0")


@app.exception_handler(ApiError)
async def _api_error(_: Request, err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


@serve.deployment(max_ongoing_requests=256)
@serve.ingress(app)
class OpenAIServer:
    def __init__(self, engine: DeploymentHandle, args: AppArgs):
        self.engine = engine
        self.model = args.model_name
        self.api_key = args.api_key
        self.created = int(time.time())

    @app.get("/health")
    async def health(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(self, request: Request) -> dict[str, Any]:
        self._auth(request)
        info = await self.engine.model_info.remote()
        card = {"id": self.model, "object": "model", "created": self.created,
                "owned_by": "sonicspec", "max_model_len": info["max_model_len"]}
        return {"object": "list", "data": [card]}

    @app.get("/stats")
    async def stats(self, reset: bool = False) -> dict[str, Any]:
        return await self.engine.stats.remote(reset)

    @app.post("/v1/completions")
    async def completions(self, request: Request):
        return await self._serve(request, CompletionBody, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(self, request: Request):
        return await self._serve(request, ChatBody, chat=True)

    # -- internals --------------------------------------------------------------------
    def _auth(self, request: Request) -> None:
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            raise ApiError("invalid API key", None, status=401, code="invalid_api_key",
                           kind="authentication_error")

    async def _serve(self, request: Request, kind, chat: bool):
        self._auth(request)
        body = parse_body(await request.body(), kind)
        if body.model != self.model:
            raise ApiError(f"the model {body.model!r} does not exist; this server serves "
                           f"{self.model!r}", "model", code="model_not_found")
        gen: Any = self.engine.options(stream=True).generate.remote(generate_request(body))
        first = await gen.__anext__()
        if "error" in first:
            raise ApiError(**responses.unpack_error(first))
        fmt = responses.Format(self.model, chat, first["prompt_tokens"])
        if body.stream:
            usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(responses.sse(gen, fmt, usage), media_type="text/event-stream")
        return await responses.collect(gen, fmt)
