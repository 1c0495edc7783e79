"""The HTTP side of `bertkit serve`: a FastAPI (ASGI) app, run by uvicorn.

FastAPI rather than bare Starlette (which it is built on): the request bodies are pydantic models, so the OpenAPI
schema (`/openapi.json`, `/docs`) and the per-field validation come from one declaration instead of a hand-kept
schema and hand-written checks. Endpoints:

    POST /predict    the run's task, the answers `bertkit predict` writes (the body is the task's dataclass,
                     `request_body`, validated by the pydantic model `schemas.request_model` makes of it)
    POST /embed      features as `bertkit extract` computes them: layers, combine, pool
    GET  /health     liveness and queue counters
    GET  /metadata   task, labels, an example request, model, max length, precision, backend, limits, versions

Errors: 400 bad input (malformed JSON, wrong types, unknown fields, empty texts, a pair model without pairs) and
413 over a limit (body bytes, items per request, characters per text), each with the field and the reason; 429
with Retry-After when the queue is full. A client that disconnects is dropped from the queue; on SIGTERM uvicorn
stops accepting connections and answers the requests it has before the app shuts down.
"""

import asyncio
import json
import logging
import re
import sys
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..errors import BertkitError
from ..tasks.requests import RequestError
from ..utils import LONE_SURROGATE, SURROGATE_ESCAPE, lone_surrogate
from .batcher import Batcher, QueueFull
from .engine import Engine, Job, call_items
from .schemas import ApiError, Embeddings, EmbedRequest, ErrorBody, Limits, Predictions, embed_items, request_model

log = logging.getLogger("bertkit.serve")
ERRORS = {status: {"model": ErrorBody} for status in (400, 413, 429)}


class BodyLimit:
    """ASGI middleware for POST: a body over `max_bytes` gets 413 before any of it is parsed (by its Content-Length,
    or while a chunked body streams in), one that is not JSON 400; the body read here is handed on to the app."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        kind = headers.get(b"content-type", b"application/json").split(b";")[0].strip().lower()
        if kind != b"application/json" and not kind.endswith(b"+json"):
            return await self._refuse(scope, send, 400, f"the body must be JSON with Content-Type: application/json "
                                                        f"(got {kind.decode(errors='replace')!r:.60})")
        length = headers.get(b"content-length")
        if length is not None and not length.isdigit():
            return await self._refuse(scope, send, 400, "Content-Length is not a number")
        if length is not None and int(length) > self.max_bytes:
            return await self._refuse(scope, send, 413, f"{int(length)} bytes; the server's limit is {self.max_bytes}")
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await self._refuse(scope, send, 413, f"over the server's limit of {self.max_bytes} bytes")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            return await self._refuse(scope, send, 400, f"the body is not UTF-8 text (byte {e.start})")
        if re.search(SURROGATE_ESCAPE, text):  # the tokenizer fails on one (a 500, and for the call's other requests)
            try:
                where = lone_surrogate(json.loads(text))
            except ValueError:  # not JSON: the app says so
                where = None
            if where is not None:
                return await self._refuse(scope, send, 400, LONE_SURROGATE, where or "body")
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: waits for the client to disconnect

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(scope, send, status: int, reason: str, field: str = "body"):
        response = JSONResponse(ApiError(status, field, reason).body(), status, headers={"Connection": "close"})
        await response(scope, None, send)


def field_name(loc) -> str:
    """('body', 'texts', 2) → 'texts[2]'; ('body', 'questions', 0, 'context') → 'questions[0].context'."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in ("str", "int", "bool", "float"):  # the member of a union that was tried
            continue
        else:
            out += f".{part}" if out else part
    return out or "body"


def validation_errors(errors) -> dict:
    """pydantic's errors as {detail, errors: [{field, reason}]}, one per field."""
    seen: dict[str, str] = {}
    for e in errors:
        if e["type"] == "json_invalid":
            field, reason = "body", f"invalid JSON: {e.get('ctx', {}).get('error', e['msg'])}"
        elif e["type"] == "missing" and tuple(e["loc"]) == ("body",):
            field, reason = "body", "empty body: expected a JSON object"
        else:
            field = field_name(e["loc"])
            reason = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
        seen.setdefault(field, reason)  # a union reports each member it tried; the first says enough
    errors = [{"field": f, "reason": r} for f, r in seen.items()]
    return {"detail": "; ".join(f"{e['field']}: {e['reason']}" for e in errors), "errors": errors}


async def disconnected(receive) -> None:
    """Returns when the client has gone (the body is already read: the next message is the disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def render(payload: dict) -> bytes:
    return json.dumps(payload, default=lambda a: a.tolist()).encode()  # numpy arrays (embeddings) as lists


def create_app(engine: Engine, limits: Limits | None = None, max_batch: int | None = None, max_wait_ms: float = 5.0,
               max_queue: int = 1024, executor=None) -> FastAPI:
    limits = limits or Limits()
    max_batch = call_items(engine.device) if max_batch is None else max_batch
    batcher = Batcher(engine.run, max_batch, max_wait_ms / 1000, max_queue, executor)

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        await batcher.close()
        s = batcher.stats
        print(f"bertkit serve: stopped; answered {s['answered']} of {s['accepted']} accepted requests "
              f"({s['dropped']} dropped by their clients, {s['refused']} refused with 429)", file=sys.stderr,
              flush=True)

    app = FastAPI(title="bertkit serve", version=__version__, lifespan=lifespan,
                  description=f"{engine.model}: task {engine.task_name or 'none (feature extraction only)'}, "
                              f"{engine.backend} backend, {engine.precision}; dynamic batching up to {max_batch} "
                              f"items or {max_wait_ms} ms.")
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    app.state.max_batch = max_batch  # items per model call, as chosen (the start line names it)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        body = validation_errors(exc.errors())
        missing = any(e["type"] == "missing" and len(e["loc"]) == 2 for e in exc.errors())  # a top-level field
        if missing and request.url.path == "/predict" and engine.task is not None:
            body["detail"] += f"; a request looks like {json.dumps(engine.example_request())}"
        return JSONResponse(body, 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):  # 404, 405, ...: the same body shape
        field = "body" if exc.status_code == 400 else "path"
        reason = exc.detail
        if exc.status_code == 404 and request.url.path == "/predict" and engine.task is None:
            reason = f"{engine.model} has no task head (a base checkpoint): it serves /embed only"
        return JSONResponse({"detail": f"{field}: {reason}", "errors": [{"field": field, "reason": reason}]},
                            exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(ApiError)
    async def refused(request: Request, exc: ApiError):
        return JSONResponse(exc.body(), exc.status, headers=exc.headers)

    @app.exception_handler(RequestError)  # a task's checks of a body (tasks/requests.py): 400, or 413 over a limit
    async def bad_request(request: Request, exc: RequestError):
        return await refused(request, ApiError.of(exc))

    async def answer(request: Request, job: Job, field: str, wrap: dict | None = None) -> Response:
        try:
            future = batcher.submit(job)
        except QueueFull as e:
            raise ApiError(429, "body", str(e), {"Retry-After": str(e.retry_after)}) from None
        gone = asyncio.ensure_future(disconnected(request.receive))
        try:
            await asyncio.wait({future, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not future.done():  # the client went away: its items leave the queue (or their answers are dropped)
            future.cancel()
            return Response(status_code=499)
        batcher.stats["answered"] += 1
        if job.error is not None:
            status, where, reason = job.error
            raise ApiError(status, f"{field}{where}", reason)
        if job.key[0] == "embed":  # vectors: large, made JSON off the event loop
            body = await asyncio.get_running_loop().run_in_executor(None, render, {**(wrap or {}),
                                                                                 "embeddings": job.result})
        else:  # a few answers: cheaper here than a thread handoff
            body = render({**(wrap or {}), "predictions": job.result})
        return Response(body, media_type="application/json")

    @app.get("/health", summary="liveness and queue counters")
    async def health():
        return {"status": "ok", "queued_items": batcher.queued, **batcher.stats}

    @app.get("/metadata", summary="task, labels, model, max length, precision, limits, versions")
    async def metadata():
        return {**engine.metadata(), "limits": vars(limits),
                "batching": {"max_batch": max_batch, "max_wait_ms": max_wait_ms, "max_queue": max_queue}}

    if engine.task is not None:
        body_type, field = engine.task.request_body()  # a plain dataclass; its pydantic model validates the JSON
        RequestBody = request_model(body_type)

        @app.post("/predict", response_model=Predictions, responses=ERRORS,
                  summary=f"{engine.task_name}: as `bertkit predict`")
        async def predict(body: RequestBody, request: Request):  # noqa: F821 (the task's model, made above)
            return await answer(request, engine.predict_job(body.plain(), limits), field)

    if engine.extractor is not None:
        @app.post("/embed", response_model=Embeddings, responses=ERRORS,
                  summary="contextual features, as `bertkit extract`")
        async def embed(body: EmbedRequest, request: Request):
            items = embed_items(body, limits)
            try:
                fx = engine.extractor.with_settings(body.layers, body.combine, body.pool)  # checks the settings
            except BertkitError as e:  # a layer that does not exist, or was not exported
                raise ApiError(400, "layers", str(e)) from None
            field = "texts" if body.texts is not None else "words"
            job = Job(("embed", body.layers, body.combine, body.pool), items)
            return await answer(request, job, field, {"layers": fx.layers, "dim": fx.dim})

    def openapi():  # validation errors answer 400 (documented per endpoint), not FastAPI's default 422
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            for path in schema["paths"].values():
                for op in path.values():
                    op.get("responses", {}).pop("422", None)
        return app.openapi_schema

    app.openapi = openapi
    return app
