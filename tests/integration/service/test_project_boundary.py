"""The project boundary (issue 11, items 1 and 2), attacked through the running service: real
Postgres, real HTTP, the real review flow in a real worker, and the GitLab-compatible server
recording every request it gets.

A hook secret vouches for a numeric project id and nothing else: a path in the body is a claim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fakes.gitlab_hooks import HookEvent, emoji_hook, hook_headers, merge_request_hook, note_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from pydantic import SecretStr
from service_harness import IID, PATH, PID, SECRET, LiveServer, drain_queue, post_hook, rows, scalar

from agent.gitlab.review import build_deps
from agent.service_settings import Settings
from agent.session import open_session
from api.worker import ReviewFunction, pipeline_review_function

OTHER_PID, OTHER_PATH = 555, "other/secret"
BASE = {"app.py": "def f():\n    return 1\n"}
HEAD = {  # the command comes from the request: a real source, so the shell finding is posted
    "app.py": "import subprocess\n\nfrom flask import request\n\n\n"
    "def f():\n    return subprocess.call(request.args['cmd'], shell=True)\n"
}


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, PATH)
        server.add_merge_request(PID, IID, files_base=BASE, files_head=HEAD, title="allowed")
        server.add_project(OTHER_PID, OTHER_PATH)
        server.add_merge_request(OTHER_PID, IID, files_base=BASE, files_head=HEAD, title="not ours")
        yield server


def review_function(dsn: str, gitlab: FakeGitLab, allow: str) -> Iterator[ReviewFunction]:
    """The worker's review function as `reviewloop worker` builds it from its settings."""
    settings = Settings(
        database_url=dsn, gitlab_url=gitlab.url, gitlab_token=SecretStr(BOT_TOKEN), gitlab_projects=allow
    )
    session = open_session(settings, tracing=False)
    try:
        yield pipeline_review_function(build_deps(settings, pool=session.pool, dsn=session.dsn, llm=None))
    finally:
        session.close()


def hook(gitlab: FakeGitLab, project_id: int, *, claimed_path: str | None = None, **fields: Any) -> dict[str, Any]:
    body = merge_request_hook(gitlab, project_id, IID, action="open")
    if claimed_path is not None:
        body["project"]["path_with_namespace"] = claimed_path
    body["project"].update(fields)
    return body


def touched(gitlab: FakeGitLab, project_id: int, path: str) -> list[str]:
    """Every request the fake GitLab answered about this project, by id or by path."""
    prefixes = (f"/projects/{project_id}", f"/projects/{path.replace('/', '%2F')}")
    return [f"{r.method} {r.path}" for r in gitlab.requests if r.path.startswith(prefixes)]


def test_an_allowed_path_beside_another_projects_id_reviews_nothing(
    serve: Callable[..., LiveServer], service_dsn: str, gitlab: FakeGitLab
) -> None:
    live = serve(gitlab_projects=PATH)
    # the attack of issue 11: the global secret, project 555's id, the allowed project's path
    attack = post_hook(
        live.url, hook(gitlab, OTHER_PID, claimed_path=PATH), hook_headers("Merge Request Hook", token=SECRET)
    )
    honest = post_hook(live.url, hook(gitlab, PID), hook_headers("Merge Request Hook", token=SECRET))
    assert honest.status_code == 202, honest.text
    gitlab.requests.clear()
    for review in review_function(service_dsn, gitlab, PATH):
        drain_queue(service_dsn, review)

    assert touched(gitlab, OTHER_PID, OTHER_PATH) == []  # not one request about project 555
    assert rows(service_dsn, "SELECT project, status FROM reviews WHERE NOT is_shadow") == [(str(PID), "done")]
    assert not [d for d in gitlab.discussions(OTHER_PID, IID) if d.notes[0].author.id == gitlab.bot.id]
    if attack.status_code == 202:  # accepted on the claimed path, then refused before any review
        status, reason = rows(
            service_dsn, "SELECT status, reason FROM webhook_events WHERE project_id = %s", OTHER_PID
        )[0]
        assert status == "failed" and "not in REVIEWLOOP_GITLAB_PROJECTS" in reason, reason
    else:
        assert attack.status_code == 200 and attack.json()["status"] == "ignored", attack.text


def test_an_allow_list_of_ids_refuses_other_ids_at_intake(
    serve: Callable[..., LiveServer], service_dsn: str, gitlab: FakeGitLab
) -> None:
    live = serve(gitlab_projects=str(PID))
    answer = post_hook(
        live.url, hook(gitlab, OTHER_PID, claimed_path=str(PID)), hook_headers("Merge Request Hook", token=SECRET)
    )
    assert answer.status_code == 200 and answer.json()["status"] == "ignored", answer.text
    assert int(scalar(service_dsn, "SELECT count(*) FROM procrastinate_jobs")) == 0


def test_a_project_id_sent_as_text_is_refused_not_coerced(
    serve: Callable[..., LiveServer], service_dsn: str, gitlab: FakeGitLab
) -> None:
    # project 42 has its own secret; "42" as a string used to fall back to the global one
    live = serve(project_secrets={str(PID): SecretStr("project-42-only")})
    for token in (SECRET, "project-42-only"):
        answer = post_hook(live.url, hook(gitlab, PID, id=str(PID)), hook_headers("Merge Request Hook", token=token))
        assert answer.status_code == 400, (token, answer.text)
        assert "project.id must be an integer" in answer.json()["error"]
    # the global secret does not open project 42, whose own secret does
    assert post_hook(live.url, hook(gitlab, PID), hook_headers("Merge Request Hook", token=SECRET)).status_code == 401
    ok = post_hook(live.url, hook(gitlab, PID), hook_headers("Merge Request Hook", token="project-42-only"))
    assert ok.status_code == 202, ok.text
    assert int(scalar(service_dsn, "SELECT count(*) FROM webhook_events")) == 1


def as_from(body: dict[str, Any], project_id: int, path: str) -> dict[str, Any]:
    """The same hook body, "from" another project (its id and path, both consistent)."""
    return {
        **body,
        "project_id": project_id,
        "project": {**body["project"], "id": project_id, "path_with_namespace": path},
    }


def test_votes_and_replies_count_only_in_the_project_they_came_from(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab
) -> None:
    queued = post_hook(service.url, hook(gitlab, PID), hook_headers("Merge Request Hook", token=SECRET))
    assert queued.status_code == 202, queued.text
    for review in review_function(service_dsn, gitlab, ""):
        drain_queue(service_dsn, review)
    ((finding_id, note_id, discussion_id),) = rows(
        service_dsn, "SELECT id, note_id, discussion_id FROM findings WHERE note_id IS NOT NULL ORDER BY id LIMIT 1"
    )
    reply = gitlab.reply(PID, IID, discussion_id, "👎 not a problem here", user=gitlab.human)

    # a hook "from" project 1, naming project 42's note and discussion ids (sequential, guessable)
    foreign: list[tuple[dict[str, Any], HookEvent]] = [
        (as_from(emoji_hook(gitlab, PID, IID, note_id, name="thumbsdown"), 1, "some/project"), "Emoji Hook"),
        (as_from(note_hook(gitlab, PID, IID, reply.id), 1, "some/project"), "Note Hook"),
    ]
    for body, event in foreign:
        answer = post_hook(service.url, body, hook_headers(event, token=SECRET))
        assert answer.status_code == 200 and answer.json()["status"] == "ignored", answer.text
    assert rows(service_dsn, "SELECT count(*) FROM feedback") == [(0,)]

    # the same vote from the project the finding belongs to counts
    own = post_hook(
        service.url, emoji_hook(gitlab, PID, IID, note_id, name="thumbsup"), hook_headers("Emoji Hook", token=SECRET)
    )
    assert own.json()["status"] == "processed", own.text
    assert rows(service_dsn, "SELECT finding_id, value FROM feedback") == [(finding_id, 1)]


def test_project_secrets_are_keyed_by_id_only() -> None:
    with pytest.raises(ValueError, match="numeric project ids"):
        Settings(project_secrets={PATH: SecretStr("by-path")})
