"""vLLM's runtime LoRA endpoints on loopback, answering the way vLLM's API server does.

`POST /v1/load_lora_adapter {"lora_name", "lora_path"}` → 200 with a plain-text success line; the
same name again → 400 with vLLM's JSON error ("… has already been loaded"); a missing adapter
directory → 404 JSON error (vLLM's "No adapter found"); a wrong bearer token → 401. With
`runtime_updates=False` the route does not exist (404), as when VLLM_ALLOW_RUNTIME_LORA_UPDATING is
unset. Every request is recorded with its body and headers.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class FakeVllmLora:
    api_key: str | None = "sk-vllm"
    runtime_updates: bool = True
    loaded: dict[str, str] = field(default_factory=dict)  # lora_name → lora_path
    requests: list[dict[str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FakeVllmLora:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet test output
                pass

            def _reply(self, status: int, body: str, content_type: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, kind: str) -> None:
                body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
                self._reply(status, json.dumps(body), "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                if self.path != "/v1/load_lora_adapter" or not fake.runtime_updates:
                    self._reply(404, json.dumps({"detail": "Not Found"}), "application/json")
                    return
                if fake.api_key and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    self._reply(401, json.dumps({"error": "Unauthorized"}), "application/json")
                    return
                name, path = body.get("lora_name"), body.get("lora_path")
                if name in fake.loaded:
                    self._error(400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
                    return
                if not path or not (Path(path) / "adapter_config.json").is_file():
                    self._error(404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError")
                    return
                fake.loaded[name] = path
                self._reply(200, f"Success: LoRA adapter '{name}' added successfully.", "text/plain")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
