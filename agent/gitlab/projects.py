"""Whether a project is one the allow-list names: by its numeric id, or by a path GitLab confirms.

A hook's secret vouches for a numeric project id; the path beside it is the sender's claim. So an
allow-list entry that is an id is matched directly, and one that is a path is asked of GitLab: the
project GitLab has at that path must have this id. Reviews (the worker) and votes and replies (the
API) ask the same question, here, before they read or count anything.
"""

from __future__ import annotations

from typing import Protocol

from reviewers.kernel.errors import InputError, PlatformError, PlatformUnavailableError


class ProjectIds(Protocol):
    """What the check needs of GitLab: the numeric id of the project at a path."""

    def project_id(self, project: str) -> int: ...


def confirm_project_allowed(platform: ProjectIds, project: str, allowed: frozenset[str]) -> None:
    """Refuse (InputError, not retried) a project the allow-list does not name.

    `project` is a numeric id. Raises PlatformUnavailableError when GitLab cannot answer for a path.
    """
    if not allowed or project in allowed:
        return
    for entry in sorted(allowed):
        if entry.isdigit():
            continue
        try:
            if str(platform.project_id(entry)) == project:
                return
        except PlatformUnavailableError:
            raise
        except PlatformError:
            continue  # a path the bot cannot see (404/403) names no project of ours
    raise InputError(f"project {project} is not in REVIEWLOOP_GITLAB_PROJECTS; not reviewed", project=project)
