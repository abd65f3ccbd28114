"""The HTTP side: an ASGI app (Starlette) with the OpenAI routes over the served models.

    /v1/chat/completions, /v1/completions   language models (continuous batching, streaming)
    /v1/translations                        translators (source_lang / target_lang)
    /v1/embeddings                          encoder packages (sentence embeddings)
    /v1/models, /health, /metrics           the served models, liveness, Prometheus text

Decoding runs on threads (the scheduler's and one per choice); the event loop only moves text.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ...core.schema import PackageError
from ..api import Generator, Translator
from ..session import RuntimeSettings
from .embeddings import ServedEmbedder
from .engine import Piece, Request, ServedLM, ServedTranslator, TokenLogprob
from .protocol import APIError, bad, check_fields, options_error, parse_body
from .scheduler import BatchSettings, Busy

log = logging.getLogger("edgeformer")
Served = ServedLM | ServedTranslator | ServedEmbedder
DISCONNECT_POLL_S = 0.1  # how often a whole answer's request checks its client is there
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The server's Prometheus metrics, in a registry of its own."""

    def __init__(self, models: Mapping[str, Served]):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("edgeformer_requests", "HTTP requests answered",
                                ["route", "status"], registry=r)  # fmt: skip
        self.prompt_tokens = Counter("edgeformer_prompt_tokens", "prompt tokens of requests",
                                     ["model"], registry=r)  # fmt: skip
        self.cached_tokens = Counter(
            "edgeformer_prompt_cached_tokens", "prompt tokens whose KV cache a prefix held",
            ["model"], registry=r,
        )  # fmt: skip
        self.completion_tokens = Counter("edgeformer_completion_tokens", "tokens generated",
                                         ["model"], registry=r)  # fmt: skip
        self.latency = Histogram("edgeformer_request_seconds", "time to the whole answer",
                                 ["route", "model"], buckets=LATENCY_BUCKETS,
                                 registry=r)  # fmt: skip
        self.ttft = Histogram("edgeformer_time_to_first_token_seconds",
                              "time to the first generated token", ["route", "model"],
                              buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        waiting = Gauge("edgeformer_queue_depth", "requests waiting for a row of the batch",
                        ["model"], registry=r)  # fmt: skip
        running = Gauge("edgeformer_running_rows", "rows decoding in the batch", ["model"],
                        registry=r)  # fmt: skip
        steps = Gauge("edgeformer_decode_steps", "batched decoder steps run", ["model"],
                      registry=r)  # fmt: skip
        rows = Gauge("edgeformer_decode_step_rows", "rows over all decoder steps", ["model"],
                     registry=r)  # fmt: skip
        prefilled = Gauge("edgeformer_prefilled_tokens", "prompt tokens run through the graph",
                          ["model"], registry=r)  # fmt: skip
        stepping = Gauge("edgeformer_decode_step_seconds", "time in batched decoder steps",
                         ["model"], registry=r)  # fmt: skip
        for name, served in models.items():
            if isinstance(served, (ServedLM, ServedTranslator)):
                s = served.scheduler
                waiting.labels(name).set_function(functools.partial(getattr, s, "queue_depth"))
                running.labels(name).set_function(functools.partial(getattr, s, "running"))
                c = s.counters
                steps.labels(name).set_function(functools.partial(getattr, c, "steps"))
                rows.labels(name).set_function(functools.partial(getattr, c, "stepped_rows"))
                prefilled.labels(name).set_function(
                    functools.partial(getattr, c, "prefilled_tokens")
                )
                stepping.labels(name).set_function(functools.partial(getattr, c, "step_seconds"))

    def text(self) -> bytes:
        return generate_latest(self.registry)


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def sse(data: object) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


@dataclass
class Answer:
    """A choice gathered whole (non-streaming)."""

    text: str
    logprobs: list[TokenLogprob]
    tokens: int
    finish_reason: str | None
    cached_tokens: int


def logprobs_json(kind: str, lps: list[TokenLogprob], start: int = 0) -> dict:
    """The API's logprobs object: completions' token lists, chat's `content` entries."""
    if kind == "chat":
        return {"content": [
            {"token": t.token, "logprob": t.logprob, "bytes": list(t.token.encode()),
             "top_logprobs": [{"token": s, "logprob": v, "bytes": list(s.encode())}
                              for s, v in t.top]}
            for t in lps
        ]}  # fmt: skip
    offsets, at = [], start
    for t in lps:
        offsets.append(at)
        at += len(t.token)
    return {"tokens": [t.token for t in lps], "token_logprobs": [t.logprob for t in lps],
            "top_logprobs": [dict(t.top) for t in lps], "text_offset": offsets}  # fmt: skip


class Server:
    """The served models and what the routes share."""

    def __init__(self, models: Mapping[str, Served], api_key: str | None = None):
        self.models, self.api_key = dict(models), api_key
        self.metrics = Metrics(self.models)
        self.created = int(time.time())

    def model(self, body: Mapping, kind: str) -> Served:
        name = body.get("model")
        if not isinstance(name, str):
            raise bad("model: the name of a served model is required (GET /v1/models)", "model")
        served = self.models.get(name)
        if served is None:
            raise APIError(404, f"the model {name!r} does not exist; served: "
                           f"{', '.join(self.models)}", "model", "model_not_found")  # fmt: skip
        if served.kind != kind:
            route, what = {"translate": ("/v1/translations", "translator"),
                           "embed": ("/v1/embeddings", "sentence-embedding model")}.get(
                served.kind, ("/v1/completions", "language model"))  # fmt: skip
            raise bad(f"model {name!r} is a {what}: use {route}", "model")
        return served

    # -- choices over threads --------------------------------------------------------------
    async def pieces(self, served: ServedLM, req: Request, stop: threading.Event
                     ) -> AsyncIterator[Piece]:  # fmt: skip
        """Every choice's pieces as they come (each choice decodes on its own thread)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def put(item: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone (shutting down)
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def work(index: int) -> None:
            found = served.run(req, index, stop)
            try:
                for piece in found:
                    put(piece)
            except BaseException as e:  # noqa: BLE001 - handed to the request's task
                put(e)
            finally:
                found.close()
                put(None)

        for i in range(req.choices):
            threading.Thread(target=work, args=(i,), daemon=True, name="edgeformer-req").start()
        done = 0
        try:
            while done < req.choices:
                item = await queue.get()
                if item is None:
                    done += 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            stop.set()  # the client went away, or an error: the other choices' rows are freed

    # -- routes ----------------------------------------------------------------------------
    async def completions(self, request: HTTPRequest) -> Response:
        return await self.generate(request, "completion")

    async def chat(self, request: HTTPRequest) -> Response:
        return await self.generate(request, "chat")

    async def generate(self, request: HTTPRequest, kind: str) -> Response:
        route = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
        body = parse_body(await request.body())
        check_fields(body, kind)
        served = self.model(body, "generate")
        assert isinstance(served, ServedLM)
        use = None
        if kind == "chat":
            if "messages" not in body:
                raise bad("messages is required", "messages")
            use = served.tool_use(body)
            prompts = [await asyncio.to_thread(served.chat_prompt, body["messages"],
                                               body.get("chat_template_kwargs"), use)]  # fmt: skip
        else:
            if "prompt" not in body:
                raise bad("prompt is required", "prompt")
            prompts = await asyncio.to_thread(served.completion_prompts, body["prompt"])
        req = served.prepare(body, kind, prompts, "messages" if kind == "chat" else "prompt", use)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise bad(f"stream={stream!r} must be true or false", "stream")
        options = body.get("stream_options") or {}
        usage_wanted = isinstance(options, dict) and bool(options.get("include_usage"))
        call = Call(self, served, req, kind, route)
        if stream:
            return StreamingResponse(call.stream(usage_wanted), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})  # fmt: skip
        return JSONResponse(await call.whole(request))

    async def translations(self, request: HTTPRequest) -> Response:
        body = parse_body(await request.body())
        check_fields(body, "translation")
        served = self.model(body, "translate")
        assert isinstance(served, ServedTranslator)
        req = served.prepare(body)
        start = time.perf_counter()
        try:
            out, sources, made = await asyncio.to_thread(served.translate, req)
        except PackageError:
            raise
        except ValueError as e:  # an option the model refuses (prepared there, once)
            raise options_error(e) from None
        name = served.name
        self.metrics.latency.labels("/v1/translations", name).observe(time.perf_counter() - start)
        self.metrics.prompt_tokens.labels(name).inc(sources)
        self.metrics.completion_tokens.labels(name).inc(made)
        return JSONResponse({
            "id": f"tr-{uuid.uuid4().hex}", "object": "translation", "created": int(time.time()),
            "model": name, "data": [{"index": i, "text": t} for i, t in enumerate(out)],
            "usage": {"prompt_tokens": sources, "completion_tokens": made,
                      "total_tokens": sources + made},
        })  # fmt: skip

    async def embeddings(self, request: HTTPRequest) -> Response:
        body = parse_body(await request.body())
        served = self.model(body, "embed")
        assert isinstance(served, ServedEmbedder)
        rows, fmt = served.prepare(body)
        start = time.perf_counter()
        vectors = await asyncio.to_thread(served.embed, rows)
        self.metrics.latency.labels("/v1/embeddings", served.name).observe(
            time.perf_counter() - start
        )
        self.metrics.prompt_tokens.labels(served.name).inc(sum(map(len, rows)))
        return JSONResponse(served.response(vectors, rows, fmt))

    async def list_models(self, request: HTTPRequest) -> Response:
        return JSONResponse({"object": "list", "data": [self.model_card(n) for n in self.models]})

    async def get_model(self, request: HTTPRequest) -> Response:
        name = request.path_params["name"]
        if name not in self.models:
            raise APIError(404, f"the model {name!r} does not exist", "model", "model_not_found")
        return JSONResponse(self.model_card(name))

    def model_card(self, name: str) -> dict:
        served = self.models[name]
        if isinstance(served, ServedEmbedder):
            return {"id": name, "object": "model", "created": self.created,
                    "owned_by": "edgeformer", "task": served.kind, "variant": served.variant,
                    "max_model_len": served.embedder.max_seq_length, **served.card()}  # fmt: skip
        card = {"id": name, "object": "model", "created": self.created, "owned_by": "edgeformer",
                "task": served.kind, "variant": served.model.variant,
                "max_model_len": served.model.max_len}  # fmt: skip
        if isinstance(served, ServedLM):
            card["context"] = served.context
            card["chat_template"] = served.model.chat_template is not None
        else:
            card["languages"] = served.translator.languages
        return card

    async def health(self, request: HTTPRequest) -> Response:
        return JSONResponse({"status": "ok", "models": list(self.models), "pid": os.getpid()})

    async def prometheus(self, request: HTTPRequest) -> Response:
        return Response(self.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    def close(self) -> None:
        for served in self.models.values():
            served.close()


class Call:
    """One completion request being answered: whole, or streamed as server-sent events."""

    def __init__(self, server: Server, served: ServedLM, req: Request, kind: str, route: str):
        self.server, self.served, self.req, self.kind, self.route = (
            server, served, req, kind, route
        )  # fmt: skip
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.start = time.perf_counter()
        self.first: float | None = None
        self.stop = threading.Event()

    def saw(self, piece: Piece) -> None:
        if self.first is None and piece.tokens:
            self.first = time.perf_counter()
            m = self.server.metrics
            m.ttft.labels(self.route, self.served.name).observe(self.first - self.start)

    def usage(self, made: int, cached: int) -> dict:
        prompt = self.req.prompt_tokens
        m, name = self.server.metrics, self.served.name
        m.prompt_tokens.labels(name).inc(prompt)
        m.cached_tokens.labels(name).inc(cached)
        m.completion_tokens.labels(name).inc(made)
        m.latency.labels(self.route, name).observe(time.perf_counter() - self.start)
        return {"prompt_tokens": prompt, "completion_tokens": made, "total_tokens": prompt + made,
                "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip

    async def watch(self, request: HTTPRequest) -> None:
        """Set `stop` when the client goes away before its whole answer (its rows are freed
        at the next step, as a stream's are)."""
        while not self.stop.is_set():
            if await request.is_disconnected():
                self.stop.set()
                return
            await asyncio.sleep(DISCONNECT_POLL_S)

    async def whole(self, request: HTTPRequest) -> dict:
        parts: dict[int, list[Piece]] = {i: [] for i in range(self.req.choices)}
        watcher = asyncio.create_task(self.watch(request))
        try:
            async for piece in self.server.pieces(self.served, self.req, self.stop):
                self.saw(piece)
                parts[piece.index].append(piece)
        except Busy as e:
            raise APIError(503, str(e), None, "server_busy", "server_error") from None
        finally:
            watcher.cancel()
        answers = []
        for i in range(self.req.choices):
            ps = parts[i]
            answers.append(Answer("".join(p.text for p in ps),
                                  [lp for p in ps for lp in p.logprobs], sum(p.tokens for p in ps),
                                  ps[-1].finish_reason if ps else None,
                                  ps[-1].cached_tokens if ps else 0))  # fmt: skip
        made = sum(a.tokens for a in answers)
        usage = self.usage(made, max((a.cached_tokens for a in answers), default=0))
        choices = []
        for i, a in enumerate(answers):
            lps = None if self.req.top_logprobs is None else logprobs_json(self.kind, a.logprobs)
            if self.kind == "chat":
                message = self.req.tools.message(a.text)
                finish = "tool_calls" if "tool_calls" in message else a.finish_reason
                choices.append({"index": i, "finish_reason": finish, "logprobs": lps,
                                "message": message})  # fmt: skip
            else:
                choices.append({"index": i, "text": a.text, "finish_reason": a.finish_reason,
                                "logprobs": lps})  # fmt: skip
        obj = "chat.completion" if self.kind == "chat" else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created,
                "model": self.served.name, "choices": choices, "usage": usage}  # fmt: skip

    def chunk(self, choices: list[dict], usage: dict | None = None) -> str:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        data: dict = {"id": self.id, "object": obj, "created": self.created,
                      "model": self.served.name, "choices": choices}  # fmt: skip
        if usage is not None:
            data["usage"] = usage
        return sse(data)

    def choice(self, piece: Piece, offsets: dict[int, int]) -> dict:
        lps = None
        if self.req.top_logprobs is not None:
            lps = logprobs_json(self.kind, piece.logprobs, offsets.get(piece.index, 0))
        offsets[piece.index] = offsets.get(piece.index, 0) + len(piece.text)
        if self.kind == "chat":
            delta = {"content": piece.text} if piece.text or not piece.finish_reason else {}
            return {"index": piece.index, "delta": delta, "logprobs": lps,
                    "finish_reason": piece.finish_reason}  # fmt: skip
        return {"index": piece.index, "text": piece.text, "logprobs": lps,
                "finish_reason": piece.finish_reason}  # fmt: skip

    def tool_chunks(self, pieces: list[Piece], offsets: dict[int, int]) -> Iterator[str]:
        """A chat choice with tools, streamed once whole (its calls are parsed from the whole
        reply, as llama.cpp's server does without incremental parsing): its text as one delta,
        then each call as a delta.tool_calls entry, then finish_reason "tool_calls" (or the
        reply's own when it made none)."""
        last = pieces[-1]
        whole = Piece(last.index, "".join(p.text for p in pieces),
                      [lp for p in pieces for lp in p.logprobs], sum(p.tokens for p in pieces),
                      None, last.cached_tokens)  # fmt: skip
        message = self.req.tools.message(whole.text)
        calls = message.get("tool_calls")
        if not calls:
            whole.finish_reason = last.finish_reason
            yield self.chunk([self.choice(whole, offsets)])
            return
        if message["content"] or whole.logprobs:
            whole.text = message["content"] or ""
            yield self.chunk([self.choice(whole, offsets)])
        deltas = [{"index": j, **call} for j, call in enumerate(calls)]
        for delta in deltas:
            yield self.chunk([{"index": last.index, "delta": {"tool_calls": [delta]},
                               "logprobs": None, "finish_reason": None}])  # fmt: skip
        yield self.chunk([{"index": last.index, "delta": {}, "logprobs": None,
                           "finish_reason": "tool_calls"}])  # fmt: skip

    async def stream(self, usage_wanted: bool) -> AsyncIterator[str]:
        made, cached, offsets = 0, 0, dict[int, int]()
        try:
            if self.kind == "chat":
                yield self.chunk([{"index": i, "delta": {"role": "assistant", "content": ""},
                                   "logprobs": None, "finish_reason": None}
                                  for i in range(self.req.choices)])  # fmt: skip
            held: dict[int, list[Piece]] = {}  # tools: each choice's pieces till its end
            async for piece in self.server.pieces(self.served, self.req, self.stop):
                self.saw(piece)
                made += piece.tokens
                cached = max(cached, piece.cached_tokens)
                if self.kind == "chat" and self.req.tools.parses:
                    held.setdefault(piece.index, []).append(piece)
                    if piece.finish_reason:
                        for chunk in self.tool_chunks(held.pop(piece.index), offsets):
                            yield chunk
                elif piece.text or piece.logprobs or piece.finish_reason:
                    yield self.chunk([self.choice(piece, offsets)])
            usage = self.usage(made, cached)
            if usage_wanted:
                yield self.chunk([], usage)
            yield "data: [DONE]\n\n"
        except Busy as e:
            yield sse(APIError(503, str(e), None, "server_busy", "server_error").body())
        except APIError as e:
            yield sse(e.body())
        except Exception as e:  # noqa: BLE001 - after the headers: the error as an event
            yield sse(APIError(500, f"{type(e).__name__}: {e}", kind="server_error").body())
        finally:
            self.stop.set()  # a client that went away frees its rows at the next step


def app_of(server: Server) -> Starlette:
    """The ASGI app: routes, API key, OpenAI error objects, request counts."""

    def handler(path: str, call: Callable) -> Callable:
        """`call` answering `path` (the route's template: the metrics' label)."""

        async def run(request: HTTPRequest) -> Response:
            try:
                if server.api_key is not None and request.url.path.startswith("/v1/"):
                    given = request.headers.get("authorization", "")
                    if not secrets.compare_digest(given, f"Bearer {server.api_key}"):
                        raise APIError(401, "invalid or missing API key (Authorization: Bearer "
                                       "KEY)", None, "invalid_api_key")  # fmt: skip
                response = await call(request)
            except APIError as e:
                response = error_response(e)
            except Busy as e:
                response = error_response(APIError(503, str(e), None, "server_busy",
                                                   "server_error"))  # fmt: skip
            except Exception as e:  # noqa: BLE001 - a bug or a package's failure: still JSON
                log.exception("%s %s failed", request.method, request.url.path)
                response = error_response(APIError(500, f"{type(e).__name__}: {e}", None, None,
                                                   "server_error"))  # fmt: skip
            server.metrics.requests.labels(path, str(response.status_code)).inc()
            return response

        return run

    routes = [
        Route(path, handler(path, call), methods=[method])
        for path, call, method in (
            ("/v1/completions", server.completions, "POST"),
            ("/v1/chat/completions", server.chat, "POST"),
            ("/v1/translations", server.translations, "POST"),
            ("/v1/embeddings", server.embeddings, "POST"),
            ("/v1/models", server.list_models, "GET"),
            ("/v1/models/{name:path}", server.get_model, "GET"),
            ("/health", server.health, "GET"),
            ("/metrics", server.prometheus, "GET"),
        )
    ]

    async def not_found(request: HTTPRequest, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        message = "no such route" if status == 404 else "method not allowed on this route"
        return error_response(APIError(status, f"{message}: {request.method} {request.url.path}"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        server.close()

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found},
                     lifespan=lifespan)  # fmt: skip


# ---- loading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeConfig:
    """What `edgeformer serve` serves and how: every package runs with `runtime` (as a
    Translator / Generator given it), a language model or translator batches as `batch` says."""

    packages: tuple[str, ...]  # PKG or NAME=PKG
    batch: BatchSettings = BatchSettings()
    runtime: RuntimeSettings = RuntimeSettings()
    truncate: bool = False  # prompts longer than the context keep their end
    api_key: str | None = None


def named(spec: str) -> tuple[str, str]:
    """NAME=PKG or PKG -> (name, package): a package's name is its folder's."""
    from pathlib import Path

    name, sep, path = spec.partition("=")
    if not sep:
        path = spec
        name = Path(spec.rstrip("/")).name
    if not name or not path:
        raise ValueError(f"{spec!r}: give a package folder, a bundled name or NAME=PKG")
    return name, path


def load_models(config: ServeConfig) -> dict[str, Served]:
    """Each package loaded once (Translator or Generator, as its family says)."""
    from ..embed import Embedder, is_encoder_package
    from ..package import load_package

    models: dict[str, Served] = {}
    runtime = config.runtime
    for spec in config.packages:
        name, path = named(spec)
        if name in models:
            raise ValueError(f"two packages are named {name!r}: name them (NAME=PKG)")
        if is_encoder_package(path):
            embedder = Embedder(path, runtime.variant, settings=runtime.sessions())
            models[name] = ServedEmbedder(name, embedder, config.truncate)
            continue
        family = load_package(path).family
        if family == "encoder-decoder":
            translator = Translator(path, settings=runtime)
            models[name] = ServedTranslator(name, translator, config.batch)
        else:
            gen = Generator(path, settings=runtime)
            models[name] = ServedLM(name, gen, config.batch, config.truncate)
    return models


def create_app(config: ServeConfig) -> Starlette:
    """The ASGI app serving `config.packages` (what `edgeformer serve` runs under uvicorn)."""
    if not config.packages:
        raise ValueError("serve needs at least one package")
    return app_of(Server(load_models(config), config.api_key))


@contextlib.contextmanager
def running(app: Starlette, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """`app` served by uvicorn on a thread: yields its base URL (tests, the bench)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           lifespan="on"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True, name="edgeformer-uvicorn")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
