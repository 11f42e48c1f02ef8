"""The `openai_server` fixture, as a pytest plugin: `pytest_plugins = ("fakes.openai_fixtures",)`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    """A started fake OpenAI-compatible server on loopback, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server
