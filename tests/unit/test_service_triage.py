"""The webhook's pure parts: which hooks start a review, which become votes, how the
secret is chosen and compared, and how API tokens are parsed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from api.auth import (
    hash_token,
    match_env_token,
    matches_any_secret,
    parse_env_tokens,
    token_matches,
    webhook_secret_for,
)
from api.gitlab_hooks import HookValidationError, ProjectIdError, parse_hook, project_keys
from api.triage import Ignore, ReplyInDiscussion, ReviewRequest, ReviewTrigger, Scope, VoteOnNote, reply_vote, triage

HEAD = "a" * 40
SCOPE = Scope(bot_user_id=99, bot_username="reviewloop-bot")


def mr_hook(action: str | None = "open", **attributes: Any) -> dict[str, Any]:
    changes = attributes.pop("changes", {})
    body: dict[str, Any] = {
        "object_kind": "merge_request",
        "user": {"id": 7, "username": "alice"},
        "project": {"id": 3, "path_with_namespace": "grp/app", "unknown_field": [1, 2]},
        "object_attributes": {"iid": 12, "action": action, "state": "opened", "last_commit": {"id": HEAD}},
        "changes": changes,
        "something_new_in_gitlab_18": {"x": 1},
    }
    body["object_attributes"].update(attributes)
    return body


def decide(body: dict[str, Any], scope: Scope = SCOPE) -> Any:
    return triage(parse_hook(body), scope)


@pytest.mark.parametrize(
    ("body", "trigger"),
    [
        (mr_hook("open"), "opened"),
        (mr_hook("reopen"), "reopened"),
        (mr_hook("update", oldrev="b" * 40), "new_commits"),
        (mr_hook("update", changes={"draft": {"previous": True, "current": False}}), "ready"),
        (mr_hook("update", changes={"work_in_progress": {"previous": True, "current": False}}), "ready"),
    ],
)
def test_reviewable_merge_request_events(body: dict[str, Any], trigger: ReviewTrigger) -> None:
    assert decide(body) == ReviewRequest(
        project_id=3, project_path="grp/app", mr_iid=12, head_sha=HEAD, trigger=trigger
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (mr_hook("open", draft=True), "merge request is a draft"),
        (mr_hook("update", oldrev="b" * 40, work_in_progress=True), "merge request is a draft"),
        (mr_hook("update"), "update without new commits"),
        (
            mr_hook("update", changes={"draft": {"previous": False, "current": True}}, draft=True),
            "merge request is a draft",
        ),
        (mr_hook("update", changes={"title": {"previous": "a", "current": "b"}}), "update without new commits"),
        (mr_hook("close", state="closed"), "merge request is closed"),
        (mr_hook("merge", state="merged"), "merge request is merged"),
        (mr_hook("approved"), "merge request action 'approved' does not start a review"),
        (mr_hook(None), "merge request action None does not start a review"),
        (mr_hook("open", last_commit=None), "merge request has no commits yet"),
    ],
)
def test_ignored_merge_request_events(body: dict[str, Any], reason: str) -> None:
    assert decide(body) == Ignore(reason)


def test_project_allow_list_by_id_or_path() -> None:
    assert isinstance(decide(mr_hook(), Scope(projects=frozenset({"3"}))), ReviewRequest)
    assert isinstance(decide(mr_hook(), Scope(projects=frozenset({"grp/app"}))), ReviewRequest)
    assert decide(mr_hook(), Scope(projects=frozenset({"grp/other", "4"}))) == Ignore(
        "project grp/app is not in REVIEWLOOP_GITLAB_PROJECTS"
    )
    # an id entry is matched by the id only: a body claiming the path "4" is not project 4
    claimed = mr_hook()
    claimed["project"]["path_with_namespace"] = "4"
    assert isinstance(decide(claimed, Scope(projects=frozenset({"4"}))), Ignore)


def emoji_hook(name: str = "thumbsup", event_type: str = "award", user_id: int = 7) -> dict[str, Any]:
    return {
        "object_kind": "emoji",
        "event_type": event_type,
        "user": {"id": user_id, "username": "alice" if user_id == 7 else "someone"},
        "project": {"id": 3, "path_with_namespace": "grp/app"},
        "object_attributes": {"name": name, "awardable_type": "Note", "awardable_id": 501, "action": event_type},
        "note": {"id": 501, "discussion_id": "d" * 40, "author_id": 99},
        "merge_request": {"iid": 12},
    }


def test_thumbs_become_votes_and_revokes_withdraw_them() -> None:
    vote = decide(emoji_hook("thumbsup"))
    assert vote == VoteOnNote(
        project_id=3, note_id=501, discussion_id="d" * 40, note_author_id=99, user_id=7, value=1, revoked=False
    )
    assert decide(emoji_hook("thumbsdown")).value == -1
    assert decide(emoji_hook("-1")).value == -1
    revoke = decide(emoji_hook("thumbsdown", "revoke"))
    assert isinstance(revoke, VoteOnNote) and revoke.revoked and revoke.value == -1
    assert decide(emoji_hook("rocket")) == Ignore("emoji 'rocket' is not a vote")
    assert decide(emoji_hook(user_id=99)) == Ignore("our own emoji")
    on_mr = emoji_hook()
    on_mr["object_attributes"]["awardable_type"] = "MergeRequest"
    assert decide(on_mr) == Ignore("emoji on a MergeRequest, not on a note")


def note_hook(
    text: str, *, author_id: int = 7, system: bool = False, discussion_id: str | None = "e" * 40
) -> dict[str, Any]:
    return {
        "object_kind": "note",
        "user": {"id": author_id, "username": "alice" if author_id == 7 else "reviewloop-bot"},
        "project": {"id": 3, "path_with_namespace": "grp/app"},
        "object_attributes": {
            "id": 900,
            "note": text,
            "noteable_type": "MergeRequest",
            "author_id": author_id,
            "system": system,
            "discussion_id": discussion_id,
        },
        "merge_request": {"iid": 12},
    }


def test_replies_system_notes_and_our_own_notes() -> None:
    assert decide(note_hook("good catch 👍")) == ReplyInDiscussion(
        project_id=3, discussion_id="e" * 40, note_id=900, user_id=7, text="good catch 👍", value=1
    )
    assert decide(note_hook("added 1 commit", system=True)) == Ignore("system note")
    assert decide(note_hook("summary", author_id=99)) == Ignore("our own note")
    # the bot recognised by username alone, when its id is not configured
    assert decide(note_hook("summary", author_id=99), Scope(bot_username="reviewloop-bot")) == Ignore("our own note")
    assert decide(note_hook("x", discussion_id=None)) == Ignore("note is not in a discussion")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("👍", 1),
        ("agreed :+1:", 1),
        (":thumbsup: fixed", 1),
        ("👎 intended", -1),
        ("no :-1:", -1),
        ("👍 but also 👎", 0),
        ("I'll look at it", 0),
        ("+1 from me", 0),  # bare "+1" is prose, not GitLab's emoji syntax
    ],
)
def test_reply_vote(text: str, value: int) -> None:
    assert reply_vote(text) == value


def test_invalid_hooks_name_the_field() -> None:
    body = mr_hook()
    del body["object_attributes"]["iid"]
    with pytest.raises(HookValidationError, match=r"invalid merge_request hook: merge_request\.object_attributes\.iid"):
        parse_hook(body)
    with pytest.raises(HookValidationError):
        parse_hook({"object_kind": "emoji", "user": {"id": 1}})


def test_project_keys_take_the_id_as_an_integer_only() -> None:
    assert project_keys(mr_hook()) == (3, "grp/app")
    assert project_keys({"project_id": 5}) == (5, None)
    assert project_keys({}) == (None, None)
    for bad in ({"project": {"id": True}}, {"project": {"id": "3"}}, {"project": "nonsense"}, {"project_id": 5.0}):
        with pytest.raises(ProjectIdError):
            project_keys(bad)
    body = mr_hook()
    body["project"]["id"] = "3"
    with pytest.raises(HookValidationError, match="project.id"):
        parse_hook(body)


def test_secret_choice_and_comparison() -> None:
    secrets = {"3": SecretStr("per-id")}
    glob = SecretStr("global")
    assert webhook_secret_for(project_id=3, project_secrets=secrets, global_secret=glob) == secrets["3"]
    assert webhook_secret_for(project_id=9, project_secrets=secrets, global_secret=glob) == glob
    assert webhook_secret_for(project_id=None, project_secrets=secrets, global_secret=glob) == glob
    assert matches_any_secret("per-id", project_secrets=secrets, global_secret=glob)
    assert matches_any_secret("global", project_secrets=secrets, global_secret=None) is False
    assert not matches_any_secret(None, project_secrets=secrets, global_secret=glob)
    assert token_matches("global", glob)
    assert not token_matches("globa", glob)
    assert not token_matches(None, glob)
    assert not token_matches("", SecretStr(""))  # an empty configured secret never authenticates
    assert not token_matches("anything", None)


def test_api_tokens() -> None:
    tokens = parse_env_tokens(" ci:abc , dash:def,")
    assert tokens == [("ci", "abc"), ("dash", "def")]
    assert match_env_token("def", tokens) == "dash"
    assert match_env_token("de", tokens) is None
    with pytest.raises(ValueError, match="name:token"):
        parse_env_tokens("no-colon")
    with pytest.raises(ValueError):
        parse_env_tokens("name:")
    assert hash_token("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
