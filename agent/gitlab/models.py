"""The GitLab objects reviewloop reads and writes, as plain typed values.

`agent.gitlab.client.GitLabPlatform` turns GitLab's JSON into these (and `DiffPosition` back into a
`position`), so nothing above the port handles raw dictionaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from agent.context import NotReviewed
from reviewers.kernel.contracts import FileChange
from reviewers.kernel.errors import PlatformError

ProjectRef = str | int  # numeric id or "group/project" path


@dataclass(frozen=True, slots=True)
class MergeRequestInfo:
    project_id: int
    iid: int
    title: str
    description: str
    draft: bool
    state: str  # "opened", "closed", "merged", "locked"
    author_id: int
    author_username: str
    web_url: str
    source_branch: str
    target_branch: str
    sha: str | None  # the source branch head GitLab knows of


class DiffVersions(NamedTuple):
    """The three SHAs of the newest MR version, as a position needs them."""

    base_sha: str
    start_sha: str
    head_sha: str


@dataclass(frozen=True, slots=True)
class DiffPosition:
    """A GitLab text position. `new_line` alone for an added line, `old_line` alone for a removed
    one, both for an unchanged one; `old_path` and `new_path` always."""

    base_sha: str
    start_sha: str
    head_sha: str
    old_path: str
    new_path: str
    new_line: int | None = None
    old_line: int | None = None

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "position_type": "text",
            "base_sha": self.base_sha,
            "start_sha": self.start_sha,
            "head_sha": self.head_sha,
            "old_path": self.old_path,
            "new_path": self.new_path,
        }
        if self.new_line is not None:
            out["new_line"] = self.new_line
        if self.old_line is not None:
            out["old_line"] = self.old_line
        return out


class PostedNote(NamedTuple):
    """What GitLab created; unpacks as `(discussion_id, note_id)`."""

    discussion_id: str
    note_id: int


@dataclass(frozen=True, slots=True)
class ThreadNote:
    id: int
    author_id: int
    body: str
    system: bool
    type: str | None  # None, "DiscussionNote", "DiffNote"
    resolvable: bool
    resolved: bool
    position: dict[str, Any] | None
    resolved_by_id: int | None = None  # who resolved it (GitLab's `resolved_by`), when resolved


@dataclass(frozen=True, slots=True)
class Discussion:
    id: str
    individual_note: bool
    notes: tuple[ThreadNote, ...]

    @property
    def first_note(self) -> ThreadNote:
        return self.notes[0]

    @property
    def resolved(self) -> bool:
        resolvable = [n for n in self.notes if n.resolvable]
        return bool(resolvable) and all(n.resolved for n in resolvable)


@dataclass(frozen=True, slots=True)
class AwardEmoji:
    id: int
    name: str
    user_id: int


class MergeRequestDiff(NamedTuple):
    files: list[FileChange]
    not_reviewed: list[NotReviewed]
    versions: DiffVersions  # the SHAs these files were listed for: positions must use them


def discussion_from_api(raw: dict[str, Any]) -> Discussion:
    notes = tuple(
        ThreadNote(
            id=int(n["id"]),
            author_id=int((n.get("author") or {}).get("id", 0)),
            body=str(n.get("body") or ""),
            system=bool(n.get("system")),
            type=n.get("type"),
            resolvable=bool(n.get("resolvable")),
            resolved=bool(n.get("resolved")),
            position=n.get("position"),
            resolved_by_id=int((n.get("resolved_by") or {}).get("id", 0)) or None,
        )
        for n in raw.get("notes") or []
    )
    if not notes:
        raise PlatformError(f"GitLab sent discussion {raw.get('id')} without notes")
    return Discussion(str(raw["id"]), bool(raw.get("individual_note")), notes)
