"""GitLab webhook requests (headers and bodies) in GitLab's documented format, built from a `FakeGitLab`.

Shapes follow GitLab's "Webhook events" page: the Merge Request Hook (`object_kind: merge_request`,
`object_attributes.action`, `oldrev` only when commits were added, `changes.draft`), the Note Hook
for a comment on a merge request (`noteable_type: MergeRequest`, `discussion_id`, `type`, `system`)
and the Emoji Hook (`object_kind: emoji`, `event_type` award/revoke, `awardable_type: Note`, the
awarded `note` and its `merge_request`). Builders read the fake's state so a hook names real ids.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from fakes.gitlab_server import FakeGitLab, MergeRequest, Note, User

HookEvent = Literal["Merge Request Hook", "Note Hook", "Emoji Hook"]
MergeRequestAction = Literal[
    "open", "close", "reopen", "update", "approved", "unapproved", "approval", "unapproval", "merge"
]


def _hook_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def hook_headers(
    event: HookEvent,
    *,
    token: str | None,
    idempotency_key: str | None = None,
    webhook_uuid: str | None = None,
    event_uuid: str | None = None,
) -> dict[str, str]:
    """The headers GitLab sends. `Idempotency-Key` stays the same across GitLab's retries of one
    delivery; `X-Gitlab-Webhook-UUID` is new on every request."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitLab/17.6.0",
        "X-Gitlab-Event": event,
        "X-Gitlab-Instance": "http://gitlab.example.com",
        "X-Gitlab-Webhook-UUID": webhook_uuid or str(uuid.uuid4()),
        "X-Gitlab-Event-UUID": event_uuid or str(uuid.uuid4()),
        "Idempotency-Key": idempotency_key or str(uuid.uuid4()),
    }
    if token is not None:
        headers["X-Gitlab-Token"] = token
    return headers


def _user(fake: FakeGitLab, user: User) -> dict[str, Any]:
    return {
        "id": user.id,
        "name": user.name,
        "username": user.username,
        "avatar_url": None,
        "email": "[REDACTED]",
    }


def _project(fake: FakeGitLab, project_id: int) -> dict[str, Any]:
    project = fake.projects[project_id]
    namespace, _, name = project.path_with_namespace.rpartition("/")
    web = f"{fake.url}/{project.path_with_namespace}"
    return {
        "id": project.id,
        "name": name,
        "description": None,
        "web_url": web,
        "avatar_url": None,
        "git_ssh_url": f"git@127.0.0.1:{project.path_with_namespace}.git",
        "git_http_url": f"{web}.git",
        "namespace": namespace,
        "visibility_level": 0,
        "path_with_namespace": project.path_with_namespace,
        "default_branch": project.default_branch,
        "ci_config_path": None,
        "homepage": web,
        "url": f"git@127.0.0.1:{project.path_with_namespace}.git",
        "ssh_url": f"git@127.0.0.1:{project.path_with_namespace}.git",
        "http_url": f"{web}.git",
    }


def _mr_attributes(fake: FakeGitLab, mr: MergeRequest) -> dict[str, Any]:
    api = fake.merge_request_json(mr)
    project = _project(fake, mr.project_id)
    return {
        "id": mr.id,
        "iid": mr.iid,
        "target_branch": mr.target_branch,
        "source_branch": mr.source_branch,
        "source_project_id": mr.project_id,
        "author_id": mr.author.id,
        "assignee_ids": [],
        "assignee_id": None,
        "reviewer_ids": [],
        "title": api["title"],
        "created_at": mr.created_at,
        "updated_at": api["updated_at"],
        "milestone_id": None,
        "state_id": 1,
        "state": mr.state,
        "blocking_discussions_resolved": api["blocking_discussions_resolved"],
        "work_in_progress": mr.draft,
        "draft": mr.draft,
        "first_contribution": False,
        "merge_status": "can_be_merged",
        "target_project_id": mr.project_id,
        "description": mr.description,
        "url": api["web_url"],
        "source": project,
        "target": project,
        "last_commit": {
            "id": mr.latest.head_sha,
            "message": "a commit\n",
            "title": "a commit",
            "timestamp": mr.latest.created_at,
            "url": f"{project['web_url']}/-/commit/{mr.latest.head_sha}",
            "author": {"name": mr.author.name, "email": "[REDACTED]"},
        },
        "labels": [],
        "detailed_merge_status": api["detailed_merge_status"],
    }


def merge_request_hook(
    fake: FakeGitLab,
    project_id: int,
    iid: int,
    *,
    action: MergeRequestAction = "open",
    oldrev: str | None = None,
    changes: dict[str, Any] | None = None,
    user: User | None = None,
) -> dict[str, Any]:
    """A Merge Request Hook body. `oldrev` is present only when commits were pushed (action
    "update"); `changes` holds `{field: {previous, current}}` pairs such as `draft_change(True, False)`."""
    mr = fake.merge_request(project_id, iid)
    attributes = {**_mr_attributes(fake, mr), "action": action}
    if oldrev is not None:
        attributes["oldrev"] = oldrev
    return {
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "user": _user(fake, user or mr.author),
        "project": _project(fake, project_id),
        "repository": {
            "name": fake.projects[project_id].path_with_namespace.rpartition("/")[2],
            "url": _project(fake, project_id)["git_ssh_url"],
            "description": None,
            "homepage": _project(fake, project_id)["web_url"],
        },
        "object_attributes": attributes,
        "labels": [],
        "changes": changes or {},
        "assignees": [],
        "reviewers": [],
    }


def draft_change(previous: bool, current: bool) -> dict[str, Any]:
    return {"draft": {"previous": previous, "current": current}}


def _note_attributes(fake: FakeGitLab, mr: MergeRequest, note: Note) -> dict[str, Any]:
    web = fake.merge_request_json(mr)["web_url"]
    return {
        "attachment": None,
        "author_id": note.author.id,
        "change_position": None,
        "commit_id": None,
        "created_at": note.created_at,
        "discussion_id": note.discussion_id,
        "id": note.id,
        "line_code": None,
        "note": note.body,
        "noteable_id": mr.id,
        "noteable_type": "MergeRequest",
        "original_position": note.position,
        "position": note.position,
        "project_id": mr.project_id,
        "resolved_at": note.resolved_at,
        "resolved_by_id": note.resolved_by.id if note.resolved_by else None,
        "resolved_by_push": None,
        "st_diff": None,
        "system": note.system,
        "type": note.type,
        "updated_at": note.updated_at,
        "updated_by_id": None,
        "description": note.body,
        "url": f"{web}#note_{note.id}",
    }


def note_hook(
    fake: FakeGitLab,
    project_id: int,
    iid: int,
    note_id: int,
    *,
    action: Literal["create", "update"] = "create",
) -> dict[str, Any]:
    """A Note Hook body for a comment on a merge request (a reply in a thread, or a new note)."""
    mr = fake.merge_request(project_id, iid)
    note = fake.find_note(project_id, iid, note_id)
    return {
        "object_kind": "note",
        "event_type": "note",
        "user": _user(fake, note.author),
        "project_id": project_id,
        "project": _project(fake, project_id),
        "repository": {
            "name": fake.projects[project_id].path_with_namespace.rpartition("/")[2],
            "url": _project(fake, project_id)["git_ssh_url"],
            "description": None,
            "homepage": _project(fake, project_id)["web_url"],
        },
        "object_attributes": {**_note_attributes(fake, mr, note), "action": action},
        "merge_request": _mr_attributes(fake, mr),
    }


def emoji_hook(
    fake: FakeGitLab,
    project_id: int,
    iid: int,
    note_id: int,
    *,
    name: str = "thumbsup",
    event_type: Literal["award", "revoke"] = "award",
    user: User | None = None,
    award_id: int | None = None,
) -> dict[str, Any]:
    """An Emoji Hook body for a reaction on a note of a merge request. For "award" the reaction is
    also recorded on the fake (as GitLab would have it when the hook fires)."""
    mr = fake.merge_request(project_id, iid)
    note = fake.find_note(project_id, iid, note_id)
    who = user or fake.human
    if event_type == "award" and award_id is None:
        award_id = int(fake.award(project_id, iid, note_id, name, user=who)["id"])
    now = _hook_time()
    web = fake.merge_request_json(mr)["web_url"]
    return {
        "object_kind": "emoji",
        "event_type": event_type,
        "user": _user(fake, who),
        "project_id": project_id,
        "project": _project(fake, project_id),
        "object_attributes": {
            "user_id": who.id,
            "created_at": now,
            "id": award_id if award_id is not None else 0,
            "name": name,
            "awardable_type": "Note",
            "awardable_id": note.id,
            "updated_at": now,
            "action": event_type,
            "awarded_on_url": f"{web}#note_{note.id}",
        },
        "note": _note_attributes(fake, mr, note),
        "merge_request": _mr_attributes(fake, mr),
    }
