"""The model's own deadline, as the review sets it around the model's calls (issue 40).

A review's phases have deadlines of their own (`agent.graph`): the analyzers', then the model's, for
its strategy, its steps and its judgments. A backend reads what is left of the model's deadline here
and waits no longer than that for one answer (`agent.llm.openai_http`: the request's timeout; the
in-process model: `deadline_passed`, asked between two decoding steps on every path, the constrained
ones included), so a model that is slow or never answers ends with an `LLMUnavailableError` at the
deadline instead of holding the review for its whole timeout and every retry. Outside a review (no
deadline set) a backend's own timeout is all there is.

A context variable, because the deadline belongs to the review a thread works for: the graph's nodes
set it in their own thread, and work they hand to a pool runs in a copy of their context.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("reviewloop_model_deadline", default=None)


@contextmanager
def model_deadline(seconds: float | None) -> Iterator[None]:
    """The model's calls inside this block end within `seconds` from now (None: no deadline)."""
    token = _DEADLINE.set(None if seconds is None else time.monotonic() + max(0.0, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def seconds_left() -> float | None:
    """What is left of the model's deadline (0 once past it); None when none is set."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def deadline_passed() -> bool:
    """Whether the model's deadline has passed; never outside a `model_deadline` block."""
    left = seconds_left()
    return left is not None and left <= 0
