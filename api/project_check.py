"""Votes and replies are counted only for projects GitLab confirms are ours, as reviews are.

The triage (api/triage.py) lets a hook through when the allow-list names its project by id, or names
the path the hook *claims*. A claimed path authorises nothing: the worker asks GitLab which id the
allowed path has before it reviews (agent.gitlab.projects), and a vote or a reply is stored by the API
itself, so the API asks the same question before it counts one (issue 21). Only hooks admitted by a
claimed path alone need GitLab; its answer for each allowed path is kept for PATH_ANSWER_TTL_S, so the
webhook path makes at most one GitLab call per allowed path per TTL, with a short timeout and no
retries (GitLab waits 10 s for our answer).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.gitlab.projects import ProjectIds, confirm_project_allowed
from agent.service_settings import Settings
from reviewers.kernel.errors import InputError, PlatformError

PATH_ANSWER_TTL_S = 300.0  # a project moved to another path is noticed within five minutes
LOOKUP_TIMEOUT_S = 3.0  # one GET /projects/<path>, well inside GitLab's 10 s webhook timeout


@dataclass
class CachedProjectIds:
    """GitLab's answer (an id, or "no such project") for a path, kept for `ttl_s`."""

    lookup: ProjectIds
    ttl_s: float = PATH_ANSWER_TTL_S
    clock: Callable[[], float] = time.monotonic
    _answers: dict[str, tuple[int | PlatformError, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def project_id(self, project: str) -> int:
        now = self.clock()
        with self._lock:
            kept = self._answers.get(project)
        if kept is not None and kept[1] > now:
            if isinstance(kept[0], PlatformError):
                raise kept[0]
            return kept[0]
        try:
            answer: int | PlatformError = self.lookup.project_id(project)
        except PlatformError as exc:
            if exc.retryable:  # GitLab unavailable: ask again next time
                raise
            answer = exc
        with self._lock:
            self._answers[project] = (answer, now + self.ttl_s)
        if isinstance(answer, PlatformError):
            raise answer
        return answer


@dataclass(frozen=True)
class ProjectCheck:
    """Why a vote or reply from `project_id` must not count, or None when it may."""

    allowed: frozenset[str]
    gitlab: ProjectIds | None  # None: no GitLab configured, so a claimed path cannot be confirmed

    def needs_gitlab(self, project_id: int) -> bool:
        return bool(self.allowed) and str(project_id) not in self.allowed

    async def refusal(self, project_id: int) -> str | None:
        """None when the project may vote; raises PlatformUnavailableError when GitLab cannot answer."""
        if not self.needs_gitlab(project_id):
            return None
        if self.gitlab is None:
            return (
                f"project {project_id} is allowed only by a path it claims, and without REVIEWLOOP_GITLAB_URL and"
                " REVIEWLOOP_GITLAB_TOKEN the API cannot have GitLab confirm it: list the project's id instead"
            )
        try:
            await asyncio.to_thread(confirm_project_allowed, self.gitlab, str(project_id), self.allowed)
        except InputError:
            return f"project {project_id} is not in REVIEWLOOP_GITLAB_PROJECTS (GitLab confirms no allowed path for it)"
        return None


def project_check(settings: Settings) -> ProjectCheck:
    """The check the service runs, with the bot's token when GitLab is configured."""
    allowed = frozenset(settings.gitlab_project_allowlist)
    if not settings.gitlab_url or settings.gitlab_token is None:
        return ProjectCheck(allowed, None)
    from agent.gitlab.client import GitLabPlatform  # python-gitlab loads only where it is used

    platform = GitLabPlatform(
        settings.gitlab_url, settings.gitlab_token.get_secret_value(), timeout=LOOKUP_TIMEOUT_S, max_retries=0
    )
    return ProjectCheck(allowed, CachedProjectIds(platform))
