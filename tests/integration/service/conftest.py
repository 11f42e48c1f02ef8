"""Fixtures of the service tests: a fresh database with the queue schema, the service served on
loopback (uvicorn in a thread), and a fake GitLab whose state the webhook bodies are built from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fakes.gitlab_server import FakeGitLab
from service_harness import BASE, FAST_QUEUE, HEAD, IID, PATH, PID, LiveServer, make_settings

from api.app import create_app
from api.worker import ensure_queue_schema


@pytest.fixture
def service_dsn(db_dsn: str) -> str:
    """A fresh migrated database with the job queue's schema."""
    assert ensure_queue_schema(db_dsn) is True
    return db_dsn


@pytest.fixture
def serve(service_dsn: str) -> Iterator[Callable[..., LiveServer]]:
    """Start the service with settings overrides: `serve(gitlab_projects="1")`; stopped after the test."""
    started: list[LiveServer] = []

    def start(**overrides: Any) -> LiveServer:
        live = LiveServer(create_app(make_settings(service_dsn, **overrides), queue_config=FAST_QUEUE))
        started.append(live.__enter__())
        return live

    yield start
    for live in started:
        live.__exit__(None, None, None)


@pytest.fixture
def service(serve: Callable[..., LiveServer]) -> LiveServer:
    return serve()


@pytest.fixture
def fake() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, PATH)
        server.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="Change f")
        yield server
