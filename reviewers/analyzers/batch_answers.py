"""Answers an analyzer computed for many files in one process, kept until each file is analysed.

Starting bandit, ruff or semgrep's engine costs more than analysing one file, so a reviewer that will
read twenty files has them analysed in one batch first (its spec's `prefetch`); the single-file path
then reads the answer from here instead of starting a process. Reviewers run in threads, hence the
lock.

A batch may run in the background (`run_batch(..., background=True)`), so that the analyzer's own
work on the first files overlaps the process: the files it covers are claimed while it runs, and a
reader of one of them waits for the batch rather than starting a process of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MAX_BATCH_ANSWERS = 2048  # answers kept per analyzer; cleared wholesale past this


class BatchAnswers(Generic[K, V]):
    """A bounded, thread-safe map from a file's key to the analyzer's answer for that file alone."""

    def __init__(self, max_entries: int = MAX_BATCH_ANSWERS) -> None:
        self._answers: dict[K, V] = {}
        self._running: set[K] = set()  # keys a batch in flight will answer
        self._changed = threading.Condition()
        self._max_entries = max_entries

    def missing(self, keys: Iterable[K]) -> list[K]:
        """The distinct keys with no answer yet and no batch computing one, in first-seen order."""
        with self._changed:
            return [key for key in dict.fromkeys(keys) if key not in self._answers and key not in self._running]

    def store(self, answers: Mapping[K, V]) -> None:
        with self._changed:
            if len(self._answers) > self._max_entries:
                self._answers.clear()
            self._answers.update(answers)
            self._changed.notify_all()

    def run_batch(
        self, keys: Sequence[K], compute: Callable[[Sequence[K]], Mapping[K, V]], *, background: bool = False
    ) -> None:
        """Compute and keep the answers for those of `keys` nobody has computed or is computing. In
        the background, readers of those keys wait (`get(..., wait_s=...)`) until the batch ends; a
        key the batch left unanswered is then the reader's to compute alone."""
        with self._changed:
            claimed = [key for key in dict.fromkeys(keys) if key not in self._answers and key not in self._running]
            self._running.update(claimed)

        def run() -> None:
            try:
                self.store(compute(claimed))
            finally:
                with self._changed:
                    self._running.difference_update(claimed)
                    self._changed.notify_all()

        if not claimed:
            return
        if background:
            threading.Thread(target=run, name="batch-answers", daemon=True).start()
        else:
            run()

    def get(self, key: K, *, wait_s: float = 0.0) -> V | None:
        """The kept answer, waiting up to `wait_s` for a batch in flight that covers `key`."""
        with self._changed:
            self._changed.wait_for(lambda: key not in self._running, timeout=wait_s)
            return self._answers.get(key)

    def clear(self) -> None:
        with self._changed:
            self._answers.clear()

    def __contains__(self, key: object) -> bool:
        with self._changed:
            return key in self._answers

    def __getitem__(self, key: K) -> V:
        with self._changed:
            return self._answers[key]
