"""python-gitlab follows a `Link: next` header wherever it points, with the bot's token, unless
`keep_base_url=True` (issue 11). Two loopback servers: the "GitLab" answers page 1 with a next link
to another host; that host must never see a request (nor the token)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.gitlab.client import GitLabPlatform

TOKEN = "bot-token-for-tests"  # noqa: S105 - loopback test credential


def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def elsewhere() -> Iterator[tuple[ThreadingHTTPServer, list[tuple[str, str | None]]]]:
    seen: list[tuple[str, str | None]] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            seen.append((self.path, self.headers.get("PRIVATE-TOKEN")))
            self._send(b"[]")

        def _send(self, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    for server in serve(Recorder):
        yield server, seen


def test_a_next_page_on_another_host_is_not_followed_with_the_token(
    elsewhere: tuple[ThreadingHTTPServer, list[tuple[str, str | None]]],
) -> None:
    other, seen = elsewhere
    other_url = f"http://127.0.0.1:{other.server_address[1]}"
    pages: list[str] = []

    class GitLab(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            pages.append(self.path)
            first = "page=2" not in self.path
            body = json.dumps([{"id": "d1", "individual_note": False, "notes": []}] if first else []).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if first:
                nxt = f"{other_url}/api/v4/projects/1/merge_requests/2/discussions?page=2&per_page=100"
                self.send_header("Link", f'<{nxt}>; rel="next"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    for gitlab in serve(GitLab):
        platform = GitLabPlatform(f"http://127.0.0.1:{gitlab.server_address[1]}", TOKEN, max_retries=0)
        try:
            platform.discussions(1, 2)
        except Exception:  # noqa: BLE001 - the page content is not the point; where the requests went is
            pass
    assert seen == []  # the other host got nothing, token or not
    assert len(pages) == 2 and "page=2" in pages[1]  # the next page was read from GitLab itself
