"""The texts a workspace has read, kept up to a number of bytes: least recently used go first.

Reviewers read the same few files again and again, so a workspace that reads over HTTP (GitLab) or
through a subprocess (git) keeps what it read. Kept without a bound, a merge request of 400 files of
837 KB each took a worker from 165 to 541 MB (issue 21), past what its container may use. So the
cache holds at most `max_bytes` (what the strings take in memory, `sys.getsizeof`); a text evicted
is read again on its next use, and one larger than the whole bound is not kept at all. Results do
not change, only how often a file is read.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict

DEFAULT_WORKSPACE_CACHE_BYTES = 64 * 1024 * 1024  # tens of large files; a worker's limit is 512 Mi
_ABSENT_COST = 64  # a remembered "no such text" (None) still takes a little room


def text_cost(text: str | None) -> int:
    return _ABSENT_COST if text is None else sys.getsizeof(text)


class TextCache:
    """path → text (None: absent, binary or unreadable), bounded by bytes, safe across threads."""

    def __init__(self, max_bytes: int = DEFAULT_WORKSPACE_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.peak_bytes = 0  # the most it ever held: what a test (or a metric) checks against the bound
        self.misses = 0
        self._texts: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def holds(self, path: str) -> bool:
        """Whether `path` is cached, without counting a hit or a miss or touching its recency."""
        with self._lock:
            return path in self._texts

    def lookup(self, path: str) -> tuple[bool, str | None]:
        """(whether `path` is cached, its text); a hit makes it the most recently used."""
        with self._lock:
            if path not in self._texts:
                self.misses += 1
                return False, None
            self._texts.move_to_end(path)
            return True, self._texts[path]

    def store(self, path: str, text: str | None) -> None:
        cost = text_cost(text)
        with self._lock:
            if path in self._texts:
                self.bytes -= text_cost(self._texts.pop(path))
            if cost > self.max_bytes:
                return
            while self._texts and self.bytes + cost > self.max_bytes:
                _, evicted = self._texts.popitem(last=False)
                self.bytes -= text_cost(evicted)
            self._texts[path] = text
            self.bytes += cost
            self.peak_bytes = max(self.peak_bytes, self.bytes)

    def __len__(self) -> int:
        return len(self._texts)
