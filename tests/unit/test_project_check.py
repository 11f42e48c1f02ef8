"""The API's project check for votes and replies (api/project_check.py): which hooks need GitLab, and
how long GitLab's answer for a path is kept (an injected clock, no waiting)."""

from __future__ import annotations

import asyncio

import pytest

from api.project_check import CachedProjectIds, ProjectCheck
from reviewers.kernel.errors import PlatformError, PlatformUnavailableError


class Paths:
    """GitLab's answers, path → id (or an error), and every question asked."""

    def __init__(self, answers: dict[str, int | PlatformError]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def project_id(self, project: str) -> int:
        self.asked.append(project)
        answer = self.answers[project]
        if isinstance(answer, PlatformError):
            raise answer
        return answer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refusal(check: ProjectCheck, project_id: int) -> str | None:
    return asyncio.run(check.refusal(project_id))


def test_only_a_project_admitted_by_a_claimed_path_asks_gitlab() -> None:
    gitlab = Paths({"team/service": 42})
    assert refusal(ProjectCheck(frozenset(), gitlab), 555) is None  # no allow-list: every project
    assert refusal(ProjectCheck(frozenset({"555"}), gitlab), 555) is None  # allowed by its id
    assert gitlab.asked == []
    by_path = ProjectCheck(frozenset({"team/service", "7"}), gitlab)
    assert refusal(by_path, 42) is None
    assert "555 is not in REVIEWLOOP_GITLAB_PROJECTS" in (refusal(by_path, 555) or "")
    assert "list the project's id instead" in (refusal(ProjectCheck(frozenset({"team/service"}), None), 42) or "")


def test_gitlabs_answer_for_a_path_is_kept_for_the_ttl_and_an_outage_is_not() -> None:
    clock = Clock()
    gitlab = Paths({"team/service": 42, "gone/project": PlatformError("404 Project Not Found")})
    cached = CachedProjectIds(gitlab, ttl_s=300, clock=clock)
    assert [cached.project_id("team/service") for _ in range(3)] == [42, 42, 42]
    for _ in range(2):
        with pytest.raises(PlatformError, match="404"):
            cached.project_id("gone/project")
    assert gitlab.asked == ["team/service", "gone/project"]
    clock.now += 301
    gitlab.answers["team/service"] = 43  # the path now names another project
    assert cached.project_id("team/service") == 43
    gitlab.answers["down/project"] = PlatformUnavailableError("503")
    for _ in range(2):
        with pytest.raises(PlatformUnavailableError):
            cached.project_id("down/project")
    assert gitlab.asked.count("down/project") == 2  # asked again: an outage is not an answer


def test_gitlab_unavailable_is_raised_for_the_intake_to_record() -> None:
    gitlab = Paths({"team/service": PlatformUnavailableError("503")})
    with pytest.raises(PlatformUnavailableError):
        refusal(ProjectCheck(frozenset({"team/service"}), CachedProjectIds(gitlab)), 42)
