"""Fixtures of the dashboard tests: the whole service on loopback over a fresh database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from dashboard_harness import LiveServer, make_settings

from api.app import create_app
from api.worker import ensure_queue_schema


@pytest.fixture
def live(db_dsn: str) -> Iterator[LiveServer]:
    ensure_queue_schema(db_dsn)  # as `serve` and `db upgrade` do: the dashboard lists failed queue jobs
    with LiveServer(create_app(make_settings(db_dsn))) as server:
        yield server
