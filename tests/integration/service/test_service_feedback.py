"""Feedback from GitLab (Emoji and Note hooks on our threads) and through the bearer-token API, and
the read API that shows it: real HTTP, real Postgres, discussions created by the real python-gitlab
client on the fake GitLab."""

from __future__ import annotations

import uuid
from typing import Any

import gitlab
import httpx
import psycopg
import pytest
from fakes.gitlab_hooks import emoji_hook, hook_headers, note_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from service_harness import API_TOKEN, IID, PID, SECRET, LiveServer, post_hook, rows

from api.auth import create_api_token


def post_discussion(fake: FakeGitLab, body: str) -> tuple[str, int]:
    """The bot opens a thread (as the reporter does): (discussion id, first note id)."""
    client = gitlab.Gitlab(fake.url, private_token=BOT_TOKEN)
    discussion = client.projects.get(PID).mergerequests.get(IID).discussions.create({"body": body})
    return str(discussion.id), int(discussion.attributes["notes"][0]["id"])


def insert_finding(
    dsn: str, *, discussion_id: str | None, note_id: int | None, title: str = "SQL injection"
) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        review = conn.execute(
            "INSERT INTO reviews (source, project, mr_iid, head_sha, status, title)"
            " VALUES ('gitlab', %s, %s, %s, 'done', 'Change f') RETURNING id",
            (str(PID), IID, uuid.uuid4().hex),
        ).fetchone()
        assert review is not None
        finding = conn.execute(
            """
            INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,
                                  reviewer, verdict, verdict_reason, discussion_id, note_id, posted_at)
            VALUES (%s, %s, 'app.py', 2, 2, 'security', 'high', %s, 'body', 'security', 'REAL',
                    'evidence found at head', %s, %s, now())
            RETURNING id
            """,
            (review[0], uuid.uuid4().hex, title, discussion_id, note_id),
        ).fetchone()
        assert finding is not None
    return int(review[0]), int(finding[0])


def feedback_rows(dsn: str) -> list[tuple[Any, ...]]:
    return rows(dsn, "SELECT finding_id, user_key, source, value, comment FROM feedback ORDER BY id")


def emoji(service: LiveServer, body: dict[str, Any]) -> httpx.Response:
    return post_hook(service.url, body, hook_headers("Emoji Hook", token=SECRET))


def test_emoji_award_and_revoke_on_our_note_become_one_vote(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    discussion_id, note_id = post_discussion(fake, "**SQL injection** in app.py:2")
    _, finding_id = insert_finding(service_dsn, discussion_id=discussion_id, note_id=note_id)
    user_key = f"gitlab:{fake.human.id}"

    answer = emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsup"))
    assert answer.status_code == 200 and answer.json()["status"] == "processed", answer.text
    assert feedback_rows(service_dsn) == [(finding_id, user_key, "emoji", 1, None)]

    # the same user changes their mind: latest wins, still one row
    emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsdown"))
    assert feedback_rows(service_dsn) == [(finding_id, user_key, "emoji", -1, None)]
    # revoking the thumb they no longer hold changes nothing; revoking the current one withdraws it
    emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsup", event_type="revoke", award_id=1))
    assert feedback_rows(service_dsn)[0][3] == -1
    emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsdown", event_type="revoke", award_id=2))
    assert feedback_rows(service_dsn) == [(finding_id, user_key, "emoji", 0, None)]

    # another person's vote is a second row
    emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsup", user=fake.bot.__class__(8, "bob", "Bob")))
    assert [r[1:4] for r in feedback_rows(service_dsn)] == [(user_key, "emoji", 0), ("gitlab:8", "emoji", 1)]


def test_emoji_elsewhere_is_ignored(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    discussion_id, note_id = post_discussion(fake, "not tracked as a finding")
    answer = emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsup"))
    assert answer.json()["status"] == "ignored" and "not one of our findings" in answer.json()["reason"]
    insert_finding(service_dsn, discussion_id=discussion_id, note_id=note_id)
    party = emoji(service, emoji_hook(fake, PID, IID, note_id, name="tada"))
    assert party.json() == {"status": "ignored", "event_id": 2, "reason": "emoji 'tada' is not a vote"}
    ours = emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsup", user=fake.bot))
    assert ours.json()["reason"] == "our own emoji"
    assert feedback_rows(service_dsn) == []


def test_reply_in_our_discussion_is_a_comment_and_keeps_the_vote(
    service: LiveServer, service_dsn: str, fake: FakeGitLab
) -> None:
    discussion_id, note_id = post_discussion(fake, "**SQL injection** in app.py:2")
    _, finding_id = insert_finding(service_dsn, discussion_id=discussion_id, note_id=note_id)
    emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsup"))
    reply = fake.reply(PID, IID, discussion_id, "Fixed in the next commit, thanks")
    answer = post_hook(service.url, note_hook(fake, PID, IID, reply.id), hook_headers("Note Hook", token=SECRET))
    assert answer.json()["status"] == "processed", answer.text
    user_key = f"gitlab:{fake.human.id}"
    assert feedback_rows(service_dsn) == [(finding_id, user_key, "emoji", 1, "Fixed in the next commit, thanks")]
    down = fake.reply(PID, IID, discussion_id, "👎 this is intended")
    post_hook(service.url, note_hook(fake, PID, IID, down.id), hook_headers("Note Hook", token=SECRET))
    assert feedback_rows(service_dsn) == [(finding_id, user_key, "reply", -1, "👎 this is intended")]
    # a reply in a thread that is not ours stores nothing
    other, _ = post_discussion(fake, "someone else's thread")
    stray = fake.reply(PID, IID, other, "+1")
    stray_answer = post_hook(service.url, note_hook(fake, PID, IID, stray.id), hook_headers("Note Hook", token=SECRET))
    assert stray_answer.json()["status"] == "ignored"
    assert len(feedback_rows(service_dsn)) == 1


def api(service: LiveServer, method: str, path: str, token: str | None = API_TOKEN, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    headers.update(kwargs.pop("headers", {}))
    return httpx.request(method, f"{service.url}{path}", headers=headers, timeout=30, **kwargs)


def test_api_needs_a_valid_bearer_token(service: LiveServer, service_dsn: str) -> None:
    for token in (None, "wrong", API_TOKEN + "x", API_TOKEN[:-1]):
        answer = api(service, "GET", "/api/v1/reviews", token=token)
        assert answer.status_code == 401, token
        assert answer.headers["www-authenticate"] == "Bearer"
    basic = httpx.get(f"{service.url}/api/v1/reviews", headers={"Authorization": f"Basic {API_TOKEN}"}, timeout=30)
    assert basic.status_code == 401
    assert api(service, "GET", "/api/v1/reviews").status_code == 200
    stored = create_api_token(service_dsn, "dashboard")
    assert stored.startswith("rl_") and len(stored) > 40
    assert api(service, "GET", "/api/v1/reviews", token=stored).status_code == 200
    (hash_,) = rows(service_dsn, "SELECT token_hash FROM api_tokens WHERE name = 'dashboard'")[0]
    assert stored not in hash_ and len(hash_) == 64
    with psycopg.connect(service_dsn) as conn:
        conn.execute("UPDATE api_tokens SET revoked_at = now()")
    assert api(service, "GET", "/api/v1/reviews", token=stored).status_code == 401
    from reviewers.kernel.errors import ConfigError

    with pytest.raises(ConfigError, match="already exists"):
        create_api_token(service_dsn, "dashboard")


def test_feedback_api_and_review_detail(service: LiveServer, service_dsn: str, fake: FakeGitLab) -> None:
    discussion_id, note_id = post_discussion(fake, "**SQL injection** in app.py:2")
    review_id, finding_id = insert_finding(service_dsn, discussion_id=discussion_id, note_id=note_id)
    emoji(service, emoji_hook(fake, PID, IID, note_id, name="thumbsdown"))

    answer = api(service, "POST", f"/api/v1/findings/{finding_id}/feedback", json={"value": 1, "comment": "real bug"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["user_key"] == "token:ci" and answer.json()["value"] == 1
    # the same client again: latest wins; a `user` it names is recorded, and the token stays one voter
    api(service, "POST", f"/api/v1/findings/{finding_id}/feedback", json={"value": 1, "user": "carol"})
    api(service, "POST", f"/api/v1/findings/{finding_id}/feedback", json={"value": -1, "user": "dave"})
    assert api(service, "POST", "/api/v1/findings/999999/feedback", json={"value": 1}).status_code == 404
    for value in (2, True, 1.0, "1"):  # `true` == 1 in Python: it must not count as a vote
        bad = api(service, "POST", f"/api/v1/findings/{finding_id}/feedback", json={"value": value})
        assert bad.status_code == 422 and "value" in bad.json()["error"], value
    for content in (b'{"value": 1', b"[1]", b"", b"\xff"):  # every refusal in the API's one error shape
        bad = api(
            service,
            "POST",
            f"/api/v1/findings/{finding_id}/feedback",
            content=content,
            headers={"Content-Type": "application/json"},
        )
        assert bad.status_code in (400, 422) and set(bad.json()) == {"error"}, (content, bad.text)

    detail = api(service, "GET", f"/api/v1/reviews/{review_id}")
    assert detail.status_code == 200
    data = detail.json()
    assert data["project"] == str(PID) and data["mr_iid"] == IID
    (finding,) = data["findings"]
    assert finding["verdict"] == "REAL" and finding["verdict_reason"] == "evidence found at head"
    assert finding["note_id"] == note_id and finding["discussion_id"] == discussion_id
    votes = {(v["user_key"], v["claimed_user"], v["source"], v["value"], v["comment"]) for v in finding["feedback"]}
    assert votes == {
        (f"gitlab:{fake.human.id}", None, "emoji", -1, None),
        ("token:ci", "dave", "api", -1, "real bug"),
    }
    assert api(service, "GET", "/api/v1/reviews/424242").status_code == 404


def test_review_list_is_paginated(service: LiveServer, service_dsn: str) -> None:
    ids = [insert_finding(service_dsn, discussion_id=None, note_id=None, title=f"t{i}")[0] for i in range(5)]
    first = api(service, "GET", "/api/v1/reviews", params={"limit": 2}).json()
    assert first["total"] == 5 and [r["id"] for r in first["items"]] == ids[::-1][:2]
    assert first["items"][0]["findings"] == 1 and first["items"][0]["findings_real"] == 1
    last = api(service, "GET", "/api/v1/reviews", params={"limit": 2, "offset": 4}).json()
    assert [r["id"] for r in last["items"]] == [ids[0]]
    filtered = api(service, "GET", "/api/v1/reviews", params={"project": "nope"}).json()
    assert filtered == {"items": [], "total": 0, "limit": 20, "offset": 0}
    assert api(service, "GET", "/api/v1/reviews", params={"limit": 1000}).status_code == 422
