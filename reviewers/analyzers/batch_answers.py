"""Answers an analyzer computed for many files in one process, kept until each file is analysed.

Starting bandit or ruff costs more than analysing one file, so a reviewer that will read twenty files
has them analysed in one batch first (its spec's `prefetch`); the single-file path then reads the
answer from here instead of starting a process. Reviewers run in threads, hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

MAX_BATCH_ANSWERS = 2048  # answers kept per analyzer; cleared wholesale past this


class BatchAnswers(Generic[K]):
    """A bounded, thread-safe map from a file's key to the analyzer's answer for that file alone."""

    def __init__(self, max_entries: int = MAX_BATCH_ANSWERS) -> None:
        self._answers: dict[K, str] = {}
        self._lock = threading.Lock()
        self._max_entries = max_entries

    def missing(self, keys: Iterable[K]) -> list[K]:
        """The distinct keys with no answer yet, in first-seen order."""
        with self._lock:
            return [key for key in dict.fromkeys(keys) if key not in self._answers]

    def store(self, answers: Mapping[K, str]) -> None:
        with self._lock:
            if len(self._answers) > self._max_entries:
                self._answers.clear()
            self._answers.update(answers)

    def get(self, key: K) -> str | None:
        with self._lock:
            return self._answers.get(key)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._answers

    def __getitem__(self, key: K) -> str:
        with self._lock:
            return self._answers[key]
