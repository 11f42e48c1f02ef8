"""The fake GitLab itself: GitLab's pagination headers and auth answers, and webhook bodies in
GitLab's documented shapes. Other tests trust both, so they are pinned here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from fakes.gitlab_hooks import draft_change, emoji_hook, hook_headers, merge_request_hook, note_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab

from agent.gitlab.client import GitLabPlatform

PID, IID = 11, 2
BASE = {"a.py": "x = 1\n"}
HEAD = {"a.py": "x = 2\n", "b.py": "y = 1\n", "c.py": "z = 1\n"}


@pytest.fixture
def fake() -> Iterator[FakeGitLab]:
    with FakeGitLab(max_per_page=2) as server:
        server.add_project(PID, "grp/proj")
        server.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="Change", draft=True)
        yield server


def test_lists_carry_gitlab_pagination_headers(fake: FakeGitLab) -> None:
    url = f"{fake.url}/api/v4/projects/grp%2Fproj/merge_requests/{IID}/diffs"
    first = requests.get(url, headers={"PRIVATE-TOKEN": BOT_TOKEN}, params={"per_page": 100}, timeout=5)
    assert first.status_code == 200 and len(first.json()) == 2
    assert first.headers["X-Total"] == "3" and first.headers["X-Total-Pages"] == "2"
    assert first.headers["X-Page"] == "1" and first.headers["X-Next-Page"] == "2"
    assert first.links["next"]["url"].startswith(url) and "page=2" in first.links["next"]["url"]
    last = requests.get(first.links["next"]["url"], headers={"PRIVATE-TOKEN": BOT_TOKEN}, timeout=5)
    assert [d["new_path"] for d in last.json()] == ["c.py"] and last.headers["X-Next-Page"] == ""
    assert "next" not in last.links


def test_missing_or_wrong_token_is_401(fake: FakeGitLab) -> None:
    url = f"{fake.url}/api/v4/user"
    assert requests.get(url, timeout=5).status_code == 401
    answer = requests.get(url, headers={"PRIVATE-TOKEN": "nope"}, timeout=5)
    assert answer.status_code == 401 and answer.json() == {"message": "401 Unauthorized"}


def test_merge_request_hooks(fake: FakeGitLab) -> None:
    opened = merge_request_hook(fake, PID, IID, action="open")
    attrs = opened["object_attributes"]
    assert opened["object_kind"] == opened["event_type"] == "merge_request"
    assert attrs["iid"] == IID and attrs["action"] == "open" and attrs["draft"] is True and "oldrev" not in attrs
    assert attrs["last_commit"]["id"] == fake.merge_request(PID, IID).latest.head_sha
    assert opened["project"]["path_with_namespace"] == "grp/proj"
    old_head = attrs["last_commit"]["id"]
    new_head = fake.push(PID, IID, {**HEAD, "d.py": "w = 1\n"})
    pushed = merge_request_hook(fake, PID, IID, action="update", oldrev=old_head)
    assert pushed["object_attributes"]["oldrev"] == old_head
    assert pushed["object_attributes"]["last_commit"]["id"] == new_head
    fake.set_draft(PID, IID, False)
    ready = merge_request_hook(fake, PID, IID, action="update", changes=draft_change(True, False))
    assert ready["changes"]["draft"] == {"previous": True, "current": False}
    assert ready["object_attributes"]["draft"] is False
    headers = hook_headers("Merge Request Hook", token="s3cret", idempotency_key="k1")
    assert headers["X-Gitlab-Event"] == "Merge Request Hook" and headers["X-Gitlab-Token"] == "s3cret"
    assert headers["Idempotency-Key"] == "k1"
    assert hook_headers("Note Hook", token=None)["X-Gitlab-Webhook-UUID"] != headers["X-Gitlab-Webhook-UUID"]


def test_note_and_emoji_hooks_name_the_thread(fake: FakeGitLab) -> None:
    platform = GitLabPlatform(fake.url, BOT_TOKEN, max_retries=1)
    posted = platform.post_discussion(PID, IID, body="finding")
    reply = fake.reply(PID, IID, posted.discussion_id, "agreed, fixing")
    note = note_hook(fake, PID, IID, reply.id)
    assert note["object_kind"] == "note" and note["merge_request"]["iid"] == IID
    attrs = note["object_attributes"]
    assert attrs["noteable_type"] == "MergeRequest" and attrs["discussion_id"] == posted.discussion_id
    assert attrs["author_id"] == fake.human.id and attrs["system"] is False and attrs["note"] == "agreed, fixing"
    award = emoji_hook(fake, PID, IID, posted.note_id, name="thumbsdown")
    assert award["object_kind"] == "emoji" and award["event_type"] == "award"
    assert award["object_attributes"]["awardable_type"] == "Note"
    assert award["object_attributes"]["awardable_id"] == posted.note_id
    assert award["object_attributes"]["name"] == "thumbsdown" and award["user"]["id"] == fake.human.id
    assert award["note"]["discussion_id"] == posted.discussion_id and award["note"]["author_id"] == 99
    assert award["merge_request"]["iid"] == IID
    assert [a.name for a in platform.award_emoji(PID, IID, posted.note_id)] == ["thumbsdown"]
    revoke = emoji_hook(fake, PID, IID, posted.note_id, name="thumbsdown", event_type="revoke")
    assert revoke["event_type"] == revoke["object_attributes"]["action"] == "revoke"
