"""An OpenAI-compatible server on loopback that answers valid structured output after a fixed delay.

It serves requests on parallel threads, as a real model server batches them, so the benchmark
measures our concurrency and not the fake's. The answer is chosen by the JSON schema's name.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel


class DelayedLLMServer:
    def __init__(self, *, delay_s: float, strategy: BaseModel) -> None:
        self.delay_s = delay_s
        self.strategy_json = strategy.model_dump_json()
        self.calls = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _answer(self, body: dict[str, Any]) -> str:
        fmt = body.get("response_format") or {}
        name = str((fmt.get("json_schema") or {}).get("name", ""))
        if "Strategy" in name:
            return self.strategy_json
        if "Judgment" in name:
            return json.dumps({"verdict": "REAL", "reason": "evidence holds"})
        if fmt:
            return json.dumps({"tool": "finish", "reason": "done"})
        return "ok"

    def __enter__(self) -> DelayedLLMServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with owner._lock:
                    owner.calls += 1
                time.sleep(owner.delay_s)
                content = owner._answer(body)
                payload = {
                    "id": "bench",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "bench"),
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
