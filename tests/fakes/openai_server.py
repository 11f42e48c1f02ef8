"""An OpenAI-compatible chat-completions server on loopback, scripted by the test.

The real `openai` client talks to it over real HTTP, so retries, `Retry-After`, timeouts and body
handling are the client's own. The test queues replies (`enqueue`): a JSON or text answer, an
HTTP error with an optional `Retry-After`, an answer that comes after a delay, an enormous answer.
Every request is recorded with its JSON body and headers, so a test can assert what was sent (the
schema, the retry that quotes the validation error). An empty queue answers 400 with a message
saying so (400, because the client would retry a 5xx and hide the test's mistake).

Two more behaviours of a real server, when asked for: `max_model_len` is reported in `/v1/models`
as vLLM reports it, and a request whose prompt plus `max_tokens` passes it is refused with vLLM's
400 and message; and `responder`, a function of the request body, answers instead of the queue
(for concurrent callers, such as the four reviewers of one review, whose order a queue cannot know).

The `openai_server` fixture lives in `fakes.openai_fixtures`: add
`pytest_plugins = ("fakes.openai_fixtures",)` to a test module (not an import of it, which would
bypass pytest's assertion rewriting of a plugin).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

MODEL = "fake-model"


@dataclass(frozen=True)
class FakeReply:
    """One scripted answer. `contents` are the choices' texts (repeated to fill a request's `n`)."""

    status: int = 200
    contents: tuple[str, ...] = ("",)
    delay_s: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    finish_reason: str = "stop"
    raw_body: bytes | None = None

    @classmethod
    def text(cls, *contents: str, delay_s: float = 0.0, finish_reason: str = "stop") -> FakeReply:
        return cls(contents=contents or ("",), delay_s=delay_s, finish_reason=finish_reason)

    @classmethod
    def json(cls, value: Any, *, delay_s: float = 0.0) -> FakeReply:
        return cls(contents=(json.dumps(value),), delay_s=delay_s)

    @classmethod
    def error(cls, status: int, *, retry_after: float | None = None) -> FakeReply:
        headers = (("Retry-After", f"{retry_after:g}"),) if retry_after is not None else ()
        return cls(status=status, headers=headers)

    @classmethod
    def enormous(cls, chars: int) -> FakeReply:
        return cls(contents=("x" * chars,), finish_reason="length")


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


@dataclass
class FakeOpenAIServer:
    """Start with `start()` (or as a context manager); `base_url` ends in `/v1` like vLLM's."""

    delay_s: float = 0.0  # added before every answer, on top of a reply's own delay
    max_model_len: int | None = None  # vLLM's context length: reported, and enforced with its 400
    # How the server counts prompt tokens: whitespace words (None, so a test can count by hand), or
    # characters per token (a tokenizer that counts more than the client's estimate, to meet the 400).
    chars_per_token: float | None = None
    responder: Callable[[dict[str, Any]], FakeReply] | None = None  # answers instead of the queue
    requests: list[RecordedRequest] = field(default_factory=list)
    base_url: str = ""
    _queue: list[FakeReply] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    # --- the test's side ---------------------------------------------------------------------------

    def enqueue(self, *replies: FakeReply) -> None:
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )
        # A slow reply may still be sleeping when the test ends; do not wait for it.
        config = uvicorn.Config(
            app, log_level="warning", lifespan="off", ws="none", http="h11", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the server's side -------------------------------------------------------------------------

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        texts = [str(m.get("content", "")) for m in body.get("messages", [])]
        if self.chars_per_token is None:
            return sum(len(t.split()) for t in texts)
        return sum(math.ceil(len(t) / self.chars_per_token) for t in texts)

    async def _models(self, request: Request) -> Response:
        model: dict[str, Any] = {"id": MODEL, "object": "model", "owned_by": "fake"}
        if self.max_model_len is not None:
            model["max_model_len"] = self.max_model_len
        return JSONResponse({"object": "list", "data": [model]})

    def _too_long(self, body: dict[str, Any]) -> Response | None:
        """vLLM's answer to a request over the context (its wording, 0.6 to 0.10)."""
        if self.max_model_len is None:
            return None
        prompt = self.prompt_tokens(body)
        completion = int(body.get("max_tokens") or 0)
        if prompt + completion <= self.max_model_len:
            return None
        message = (
            f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
            f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        return JSONResponse({"object": "error", "message": message, "type": "BadRequestError", "code": 400}, 400)

    async def _chat(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            return JSONResponse({"error": {"message": "body is not JSON", "type": "invalid_request"}}, 400)
        with self._lock:
            self.requests.append(RecordedRequest(path=request.url.path, headers=dict(request.headers), body=body))
        refused = self._too_long(body)
        if refused is not None:
            return refused
        with self._lock:
            if self.responder is not None:
                reply: FakeReply | None = self.responder(body)
            else:
                reply = self._queue.pop(0) if self._queue else None
        if reply is None:
            return JSONResponse({"error": {"message": "no scripted reply left", "type": "test_error"}}, 400)
        if self.delay_s + reply.delay_s > 0:
            await asyncio.sleep(self.delay_s + reply.delay_s)
        headers = dict(reply.headers)
        if reply.status != 200:
            error = {"error": {"message": f"scripted {reply.status}", "type": "server_error"}}
            return JSONResponse(error, reply.status, headers=headers)
        if reply.raw_body is not None:
            return Response(reply.raw_body, 200, headers=headers, media_type="application/json")
        n = int(body.get("n") or 1)
        contents = [reply.contents[i % len(reply.contents)] for i in range(n)]
        # Token counts are whitespace words, so a test can compute them by hand.
        prompt_tokens = self.prompt_tokens(body)
        completion_tokens = sum(len(t.split()) for t in contents)
        completion = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": reply.finish_reason,
                }
                for i, text in enumerate(contents)
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return JSONResponse(completion, headers=headers)
