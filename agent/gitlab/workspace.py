"""The repository at one commit, read through the GitLab API (a `reviewers.kernel.contracts.Workspace`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

from agent.gitlab.models import ProjectRef
from agent.workspaces.text_cache import DEFAULT_WORKSPACE_CACHE_BYTES, TextCache
from reviewers.kernel.budget import SearchBudget
from reviewers.kernel.contracts import CoverageReason, SearchHit
from reviewers.pattern_search import PatternSearch, search_files

MAX_SEARCH_FILES = 200


class FileSource(Protocol):
    """What the workspace reads through (`agent.gitlab.client.GitLabPlatform`)."""

    def read_text(
        self, project: ProjectRef, path: str, ref: str
    ) -> tuple[str | None, tuple[CoverageReason, str] | None]: ...

    def list_paths(self, project: ProjectRef, ref: str) -> list[str]: ...


class GitLabWorkspace:
    """The repository at one commit, read through the API. Implements `reviewers.kernel.contracts.Workspace`.

    Files are read on demand and cached up to `cache_bytes` (the reviewers read the same few files
    again and again; `agent.workspaces.text_cache` says why the cache is bounded);
    `search` looks only at the changed files and the other files in their directories, because
    reading a whole repository over HTTP for one regular expression is not a review step."""

    def __init__(
        self,
        platform: FileSource,
        project: ProjectRef,
        head_sha: str,
        *,
        changed_paths: Sequence[str] = (),
        max_search_files: int = MAX_SEARCH_FILES,
        cache_bytes: int = DEFAULT_WORKSPACE_CACHE_BYTES,
    ) -> None:
        self.platform = platform
        self.project = project
        self.head_sha = head_sha
        self.changed_paths = list(dict.fromkeys(changed_paths))
        self.max_search_files = max_search_files
        self.cache = TextCache(cache_bytes)
        self._unreadable: dict[str, tuple[CoverageReason, str]] = {}  # small: a reason per odd file
        self._lock = threading.Lock()
        self._paths: list[str] | None = None

    def read_file(self, path: str) -> str | None:
        cached, text = self.cache.lookup(path)
        if cached:
            return text
        text, unreadable = self.platform.read_text(self.project, path, self.head_sha)
        self.cache.store(path, text)
        if unreadable is not None:
            with self._lock:
                self._unreadable[path] = unreadable
        return text

    def unreadable_reason(self, path: str) -> tuple[CoverageReason, str] | None:
        self.read_file(path)
        with self._lock:
            return self._unreadable.get(path)

    def list_paths(self) -> list[str]:
        if self._paths is None:
            self._paths = self.platform.list_paths(self.project, self.head_sha)
        return list(self._paths)

    def search_scope(self) -> list[str]:
        """The changed files first, then the other files in their directories, capped."""
        dirs = {p.rsplit("/", 1)[0] if "/" in p else "" for p in self.changed_paths}
        neighbours = [p for p in self.list_paths() if (p.rsplit("/", 1)[0] if "/" in p else "") in dirs]
        return list(dict.fromkeys([*self.changed_paths, *neighbours]))[: self.max_search_files]

    def search(self, pattern: str, *, max_hits: int = 50, budget: SearchBudget | None = None) -> list[SearchHit]:
        search = PatternSearch(pattern, budget=budget)

        def text_of(path: str) -> str | None:
            # a file not read yet is an HTTP read, counted by the call's budget (reviewers/kernel/budget.py)
            if budget is not None and not self.cache.holds(path) and not budget.may_read():
                return None
            return self.read_file(path)

        def lines_of(_path: str, text: str) -> Iterable[tuple[int, str]]:
            return enumerate(text.split("\n"), start=1)

        return search_files(search, self.search_scope(), text_of, max_hits=max_hits, lines_of=lines_of)
