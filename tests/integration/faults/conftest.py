"""Fixtures of the fault suite: a fake GitLab holding a merge request with findings, a database with
the job queue's schema, and the service on loopback in front of it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.gitlab_server import FakeGitLab

# the service tests' harness (live server, real procrastinate worker) is reused, not copied
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from fault_harness import seed_merge_request  # noqa: E402
from service_harness import FAST_QUEUE, LiveServer, make_settings  # noqa: E402

from agent.session import prepare_database  # noqa: E402
from api.app import create_app  # noqa: E402
from api.worker import ensure_queue_schema  # noqa: E402


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        seed_merge_request(server)
        yield server


@pytest.fixture
def queue_dsn(db_dsn: str) -> str:
    """A fresh database with our schema, LangGraph's checkpoints and the job queue's schema."""
    prepare_database(db_dsn)
    ensure_queue_schema(db_dsn)
    return db_dsn


@pytest.fixture
def service(queue_dsn: str) -> Iterator[LiveServer]:
    with LiveServer(create_app(make_settings(queue_dsn), queue_config=FAST_QUEUE)) as live:
        yield live
