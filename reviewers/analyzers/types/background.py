"""One review's type check in the background, so that mypy's process overlaps the other analyzers."""

from __future__ import annotations

import threading

from reviewers.analyzers.types import TIMEOUT_S, check_types
from reviewers.analyzers.types.plan import CHECKER, TypeReport
from reviewers.kernel.contracts import ReviewContext


class TypeCheck:
    """One review's type check, started in the background so it overlaps the other analyzers."""

    def __init__(self, context: ReviewContext, *, in_scope: frozenset[str] | None = None) -> None:
        self._report: TypeReport | None = None
        left = context.seconds_left()
        self._wait_s = TIMEOUT_S + 30 if left is None else min(TIMEOUT_S, left) + 5
        self._thread = threading.Thread(target=self._work, args=(context, in_scope), name="types", daemon=True)
        self._thread.start()

    def _work(self, context: ReviewContext, in_scope: frozenset[str] | None) -> None:
        try:
            self._report = check_types(context, in_scope=in_scope)
        except Exception as exc:  # whatever went wrong, the review names it and keeps every other finding
            why = f"{CHECKER} failed ({exc.__class__.__name__}: {exc}); new type errors were not checked"
            self._report = TypeReport(notes={"": [("analyzer-error", why)]})

    def result(self) -> TypeReport:
        self._thread.join(self._wait_s)
        if self._report is None:
            return TypeReport(notes={"": [("deadline", f"{CHECKER} gave no answer in time")]})
        return self._report
