"""The parts of GitLab's webhook bodies we act on, as pydantic models.

Merge Request Hook, Note Hook and Emoji Hook, after GitLab's "Webhook events" page. Only the fields
the triage reads are declared; every other field is ignored, so GitLab adding fields never breaks
intake. A body that lacks a declared field, or has one of the wrong type, fails validation and the
sender gets one 400 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, TypeAdapter, ValidationError

HANDLED_KINDS = frozenset({"merge_request", "note", "emoji"})


class HookModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class HookUser(HookModel):
    id: int
    username: str = ""
    name: str = ""


class HookProject(HookModel):
    # Strict: the id picks the secret and the project reviewed, so "42" (a string) is refused rather
    # than coerced after a different secret was chosen for it (issue 11).
    id: StrictInt
    path_with_namespace: str = ""


class HookCommit(HookModel):
    id: str


class BoolChange(HookModel):
    """One entry of a Merge Request Hook's `changes`: the value before and after the edit."""

    previous: bool | None = None
    current: bool | None = None


class MergeRequestChanges(HookModel):
    draft: BoolChange | None = None
    # GitLab before 14.x named drafts "work in progress"; both spellings still appear in the wild.
    work_in_progress: BoolChange | None = None


class MergeRequestAttributes(HookModel):
    iid: int
    id: int | None = None
    # Kept as text: GitLab adds actions over time (approved, approval, ...) and we ignore the new ones.
    action: str | None = None
    state: str = "opened"
    draft: bool = False
    work_in_progress: bool = False
    oldrev: str | None = None
    last_commit: HookCommit | None = None
    title: str = ""
    source_branch: str = ""
    target_branch: str = ""


class MergeRequestHook(HookModel):
    object_kind: Literal["merge_request"]
    user: HookUser | None = None
    project: HookProject
    object_attributes: MergeRequestAttributes
    changes: MergeRequestChanges = MergeRequestChanges()


class MergeRequestRef(HookModel):
    """The merge request a note or emoji belongs to, as embedded in Note and Emoji hooks."""

    iid: int
    last_commit: HookCommit | None = None


class NoteAttributes(HookModel):
    id: int
    note: str = ""
    noteable_type: str
    author_id: int | None = None
    system: bool = False
    discussion_id: str | None = None
    type: str | None = None
    action: str | None = None


class NoteHook(HookModel):
    object_kind: Literal["note"]
    user: HookUser
    project: HookProject
    object_attributes: NoteAttributes
    merge_request: MergeRequestRef | None = None


class EmojiAttributes(HookModel):
    name: str
    awardable_type: str
    awardable_id: int
    action: str | None = None
    user_id: int | None = None


class AwardedNote(HookModel):
    id: int
    discussion_id: str | None = None
    author_id: int | None = None
    noteable_type: str | None = None


class EmojiHook(HookModel):
    object_kind: Literal["emoji"]
    event_type: str | None = None
    user: HookUser
    project: HookProject
    object_attributes: EmojiAttributes
    note: AwardedNote | None = None
    merge_request: MergeRequestRef | None = None


Hook = Annotated[MergeRequestHook | NoteHook | EmojiHook, Field(discriminator="object_kind")]
_HOOK_ADAPTER: TypeAdapter[MergeRequestHook | NoteHook | EmojiHook] = TypeAdapter(Hook)


class HookValidationError(ValueError):
    """The body is JSON but not a hook we can read; the message names the first bad field."""


def parse_hook(payload: dict[str, Any]) -> MergeRequestHook | NoteHook | EmojiHook:
    """Validate a decoded body whose `object_kind` is one of HANDLED_KINDS."""
    try:
        return _HOOK_ADAPTER.validate_python(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise HookValidationError(f"invalid {payload.get('object_kind')} hook: {where}: {first['msg']}") from exc


class ProjectIdError(ValueError):
    """The body names its project by something other than a JSON integer."""


def project_keys(payload: dict[str, Any]) -> tuple[int | None, str | None]:
    """(project id, claimed project path) of any hook body, read before the body is validated.

    The id is taken as a JSON integer only (`ProjectIdError` otherwise): it alone chooses the
    secret and the project a review targets. The path is kept for logs and the event row; it is
    the sender's claim, never used to authenticate or authorise.
    """
    project = payload.get("project")
    raw_id: object = payload.get("project_id")
    path: object = None
    if isinstance(project, dict):
        raw_id = project.get("id", raw_id)
        path = project.get("path_with_namespace")
    elif project is not None:
        raise ProjectIdError("project must be an object")
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, int)):
        raise ProjectIdError("project.id must be an integer")
    return raw_id, path if isinstance(path, str) and path else None
