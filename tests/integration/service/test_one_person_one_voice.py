"""One person, one voice (issue 21, item 6), through the running service: real Postgres, real HTTP,
the real review flow in a real worker against the GitLab-compatible server, votes cast as GitLab
delivers them (Emoji and Note hooks) and through the feedback API.

What was seen at 9e7f37b: one GitLab user 👎'd the threads on their own merge request and the next
merge request's `eval()` finding was dropped as FALSE_POSITIVE, and the security reviewer's standing
fell so far that a critical token finding went to a human instead of a thread; one scoped API token
did the same by varying the feedback API's `user` field; and a vote naming an allowed project path
beside another project's id was counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gitlab as python_gitlab
import httpx
import psycopg
import pytest
from fakes.gitlab_hooks import emoji_hook, hook_headers, merge_request_hook, note_hook
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab, User
from pydantic import SecretStr
from service_harness import PATH, PID, SECRET, LiveServer, drain_queue, post_hook, rows

from agent.gitlab.review import build_deps
from agent.service_settings import Settings
from agent.session import open_session
from api.auth import create_api_token
from api.worker import ReviewFunction, pipeline_review_function
from reviewers.analyzers.secrets import base62_crc32

FIRST, NEXT = 1, 2  # the merge request people vote on, and the next one the verifier judges
MALLORY = User(31, "mallory", "Mallory")  # the first merge request's author
ANA, BEN, CY = User(32, "ana", "Ana"), User(33, "ben", "Ben"), User(34, "cy", "Cy")
DAN = User(35, "dan", "Dan")  # the next merge request's author

FIRST_HEAD = {
    "calc/one.py": (
        "import hashlib\nimport subprocess\n\nfrom flask import request\n\n\n"
        'def first():\n    return eval(request.args["a"])\n\n\n'
        'def second():\n    return eval(request.args["b"])\n\n\n'
        'def third():\n    return eval(request.args["c"])\n\n\n'
        'def shell():\n    return subprocess.call(request.args["cmd"], shell=True)\n\n\n'
        "def digest(password):\n    return hashlib.md5(password.encode()).hexdigest()\n\n\n"
        "def load_d(path):\n    try:\n        return open(path).read()\n    except Exception:\n        pass\n\n\n"
        "def load_e(path):\n    try:\n        return open(path).read()\n"
        "    except Exception as exc:  # noqa: F841\n        pass\n\n\n"
        "def load_f(path):\n    try:\n        return open(path).read()\n    except BaseException:\n        pass\n"
    )
}
# the next merge request's file sits in the same directory: people's votes act on a rule where they gave them
NEXT_HEAD = {
    "calc/two.py": (
        "from flask import request\n\n"
        f'GITHUB_TOKEN = "ghp_4fJ9kQ2mZx7LpR8vT3nW6yB1cD5hG0{base62_crc32("4fJ9kQ2mZx7LpR8vT3nW6yB1cD5hG0")}"\n\n\n'
        'def compute():\n    return eval(request.args["expression"])\n\n\n'
        "def read_other(path):\n    try:\n        return open(path).read()\n    except Exception:\n        pass\n"
    )
}
EVAL, QUIET, TOKEN = "python:code-eval", "ruff:S110", "secrets:known-prefix"  # high, medium, critical


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, PATH)
        server.add_merge_request(
            PID, FIRST, files_base={"calc/one.py": "X = 1\n"}, files_head=FIRST_HEAD, author=MALLORY, title="calc"
        )
        server.add_merge_request(
            PID, NEXT, files_base={"calc/two.py": "X = 1\n"}, files_head=NEXT_HEAD, author=DAN, title="tools"
        )
        yield server


@pytest.fixture
def review(service_dsn: str, gitlab: FakeGitLab) -> Iterator[Callable[[LiveServer, int], None]]:
    """Review a merge request as GitLab and the worker would: Merge Request Hook → 202 → real worker."""
    # people's votes alone decide here: the held-out track record (which holds S110 back) and the posting
    # tiers (which list unproven rules) are switched off, as an operator can (Settings.hold_by_track_record,
    # Settings.posting)
    settings = Settings(
        database_url=service_dsn,
        gitlab_url=gitlab.url,
        gitlab_token=SecretStr(BOT_TOKEN),
        hold_by_track_record=False,
        posting="all",
    )
    session = open_session(settings, tracing=False)
    function: ReviewFunction = pipeline_review_function(
        build_deps(settings, pool=session.pool, dsn=session.dsn, llm=None)
    )

    def run(service: LiveServer, iid: int) -> None:
        body = merge_request_hook(gitlab, PID, iid, action="open")
        answer = post_hook(service.url, body, hook_headers("Merge Request Hook", token=SECRET))
        assert answer.status_code == 202, answer.text
        drain_queue(service_dsn, function)

    try:
        yield run
    finally:
        session.close()


def posted(dsn: str, iid: int) -> list[tuple[int, int, str]]:
    """(finding id, note id, rule) of every thread the review of merge request `iid` posted."""
    return [
        (int(f), int(n), str(r))
        for f, n, r in rows(
            dsn,
            "SELECT f.id, f.note_id, f.rule FROM findings f JOIN reviews r ON r.id = f.review_id"
            " WHERE r.mr_iid = %s AND NOT r.is_shadow AND f.note_id IS NOT NULL ORDER BY f.id",
            iid,
        )
    ]


def verdicts(dsn: str, iid: int) -> dict[str, tuple[str, str, bool]]:
    """rule → (verdict, reason, posted as a thread) of the review of merge request `iid`."""
    found = rows(
        dsn,
        "SELECT f.rule, f.verdict, f.verdict_reason, f.note_id IS NOT NULL FROM findings f"
        " JOIN reviews r ON r.id = f.review_id WHERE r.mr_iid = %s AND NOT r.is_shadow",
        iid,
    )
    return {str(rule): (str(verdict), str(reason), bool(thread)) for rule, verdict, reason, thread in found}


def thumbs_down(service: LiveServer, gitlab: FakeGitLab, note_id: int, who: User) -> None:
    body = emoji_hook(gitlab, PID, FIRST, note_id, name="thumbsdown", user=who)
    answer = post_hook(service.url, body, hook_headers("Emoji Hook", token=SECRET))
    assert answer.status_code == 200 and answer.json()["status"] == "processed", answer.text


def summary_of(gitlab: FakeGitLab, iid: int) -> str:
    notes = [n.body for n in gitlab.notes(PID, iid) if n.author.id == gitlab.bot.id and "**The change**" in n.body]
    assert notes, "no summary note"
    return notes[-1]


def test_an_authors_thumbs_down_on_their_own_threads_neither_drop_a_rule_nor_lower_standing(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review: Callable[[LiveServer, int], None]
) -> None:
    review(service, FIRST)
    threads = posted(service_dsn, FIRST)
    assert {rule for _, _, rule in threads} == {"python:weak-hash", "python:shell-interpolation", EVAL, QUIET}
    assert len(threads) == 6  # three eval() sinks, the shell, the hash, and one thread for the three S110s
    for _, note_id, _ in threads:  # Mallory 👎 every thread on her own merge request
        thumbs_down(service, gitlab, note_id, MALLORY)
    marked = rows(service_dsn, "SELECT DISTINCT user_key, value, voter_is_author FROM feedback")
    assert marked == [(f"gitlab:{MALLORY.id}", -1, True)]

    review(service, NEXT)
    judged = verdicts(service_dsn, NEXT)
    # at 9e7f37b: eval() and S110 FALSE_POSITIVE (8 👎 from one person; 6 threads now, the S110s folded), the token NEEDS_HUMAN_REVIEW (standing)
    assert {rule: (v, thread) for rule, (v, _, thread) in judged.items()} == {
        EVAL: ("REAL", True),
        QUIET: ("REAL", True),
        TOKEN: ("REAL", True),
    }, judged


def api_vote(service: LiveServer, token: str, finding_id: int, *, user: str) -> httpx.Response:
    return httpx.post(
        f"{service.url}/api/v1/findings/{finding_id}/feedback",
        headers={"Authorization": f"Bearer {token}"},
        json={"value": -1, "user": user},
        timeout=30,
    )


def test_one_api_token_is_one_person_whatever_user_it_names(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review: Callable[[LiveServer, int], None]
) -> None:
    review(service, FIRST)
    threads = posted(service_dsn, FIRST)
    scoped = create_api_token(service_dsn, "team-42", projects=[str(PID)])
    for finding_id, _, _ in threads:
        for name in ("ana", "ben", "cy"):
            answer = api_vote(service, scoped, finding_id, user=name)
            assert answer.status_code == 200, answer.text
            assert (answer.json()["user_key"], answer.json()["claimed_user"]) == ("token:team-42", name)
    # one row per finding: the token's latest vote, with the name it claimed last
    stored = rows(service_dsn, "SELECT finding_id, user_key, claimed_user, value FROM feedback ORDER BY finding_id")
    assert stored == [(f, "token:team-42", "cy", -1) for f, _, _ in threads]

    review(service, NEXT)
    judged = verdicts(service_dsn, NEXT)
    # at 9e7f37b: 'api:team-42:ana', ':ben', ':cy' were three voters and every vote counted
    assert {rule: (v, thread) for rule, (v, _, thread) in judged.items()} == {
        EVAL: ("REAL", True),
        QUIET: ("REAL", True),
        TOKEN: ("REAL", True),
    }, judged


def test_three_people_drop_a_medium_rule_but_a_high_security_finding_goes_to_a_human_with_the_count(
    service: LiveServer, service_dsn: str, gitlab: FakeGitLab, review: Callable[[LiveServer, int], None]
) -> None:
    review(service, FIRST)
    for _, note_id, rule in posted(service_dsn, FIRST):
        if rule in (EVAL, QUIET):
            for person in (ANA, BEN, CY):  # three people, none of them the author
                thumbs_down(service, gitlab, note_id, person)
    assert rows(service_dsn, "SELECT count(DISTINCT user_key), bool_or(voter_is_author) FROM feedback") == [(3, False)]

    review(service, NEXT)
    judged = verdicts(service_dsn, NEXT)
    eval_verdict, eval_reason, eval_thread = judged[EVAL]
    assert (eval_verdict, eval_thread) == ("NEEDS_HUMAN_REVIEW", False), eval_reason  # at 9e7f37b: FALSE_POSITIVE
    assert eval_reason == (
        f"3 people rejected this rule before ({EVAL} in calc/** on this project; nobody accepted it);"
        " a high security finding is not dropped on votes alone: a human decides"
    )
    quiet_verdict, quiet_reason, _ = judged[QUIET]
    assert (quiet_verdict, quiet_reason) == (
        "FALSE_POSITIVE",
        f"3 people rejected this rule before ({QUIET} in calc/** on this project; nobody accepted it)",
    )
    assert judged[TOKEN][0] == "REAL"  # three rejected findings are too few to judge a reviewer
    assert "3 people rejected this rule before" in summary_of(gitlab, NEXT)  # where the human sees it


# --- vote and reply hooks confirm their project with GitLab, as reviews do ---------------------------

OTHER_PID, OTHER_PATH = 555, "other/secret"


def as_from(body: dict[str, Any], *, claimed_path: str) -> dict[str, Any]:
    return {**body, "project": {**body["project"], "path_with_namespace": claimed_path}}


def bot_thread(gitlab: FakeGitLab, project_id: int) -> tuple[str, int]:
    client = python_gitlab.Gitlab(gitlab.url, private_token=BOT_TOKEN)
    discussion = client.projects.get(project_id).mergerequests.get(FIRST).discussions.create({"body": "**eval**"})
    return str(discussion.id), int(discussion.attributes["notes"][0]["id"])


def finding_on(dsn: str, project_id: int, discussion_id: str, note_id: int) -> int:
    """A finding posted on `project_id` (reviewed while it was allowed)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "WITH r AS (INSERT INTO reviews (source, project, mr_iid, head_sha, status)"
            " VALUES ('gitlab', %s, %s, %s, 'done') RETURNING id)"
            " INSERT INTO findings (review_id, fingerprint, path, line, end_line, category, severity, title, body,"
            " reviewer, rule, verdict, verdict_reason, discussion_id, note_id, posted_at)"
            " SELECT r.id, %s, 'calc/one.py', 6, 6, 'security', 'high', 'eval', 'eval of input', 'security',"
            " 'python:code-eval', 'REAL', 'evidence found at head', %s, %s, now() FROM r RETURNING id",
            (str(project_id), FIRST, f"head-{project_id}", f"fp-{project_id}", discussion_id, note_id),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_vote_or_reply_claiming_an_allowed_path_counts_only_when_gitlab_confirms_it(
    serve: Callable[..., LiveServer], service_dsn: str, gitlab: FakeGitLab
) -> None:
    gitlab.add_project(OTHER_PID, OTHER_PATH)
    gitlab.add_merge_request(OTHER_PID, FIRST, files_base={"a.py": "X = 1\n"}, files_head=FIRST_HEAD)
    theirs_discussion, theirs_note = bot_thread(gitlab, OTHER_PID)
    finding_on(service_dsn, OTHER_PID, theirs_discussion, theirs_note)
    ours_discussion, ours_note = bot_thread(gitlab, PID)
    ours = finding_on(service_dsn, PID, ours_discussion, ours_note)
    live = serve(gitlab_projects=PATH, gitlab_url=gitlab.url, gitlab_token=SecretStr(BOT_TOKEN))

    # project 555's own thumb and reply, each claiming the allowed path: GitLab says that path is project 42
    reply = gitlab.reply(OTHER_PID, FIRST, theirs_discussion, "👎 not a problem", user=ANA)
    attacks = [
        (emoji_hook(gitlab, OTHER_PID, FIRST, theirs_note, name="thumbsdown", user=ANA), "Emoji Hook"),
        (note_hook(gitlab, OTHER_PID, FIRST, reply.id), "Note Hook"),
    ]
    for body, event in attacks:
        answer = post_hook(live.url, as_from(body, claimed_path=PATH), hook_headers(event, token=SECRET))
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "ignored", answer.text  # at 9e7f37b: "processed", and counted
        assert "not in REVIEWLOOP_GITLAB_PROJECTS" in answer.json()["reason"]
    assert rows(service_dsn, "SELECT count(*) FROM feedback") == [(0,)]

    # project 42's own vote on the same path is confirmed and counted; GitLab was asked once for the path
    honest = post_hook(
        live.url,
        emoji_hook(gitlab, PID, FIRST, ours_note, name="thumbsdown", user=ANA),
        hook_headers("Emoji Hook", token=SECRET),
    )
    assert honest.json()["status"] == "processed", honest.text
    assert rows(service_dsn, "SELECT finding_id, user_key FROM feedback") == [(ours, f"gitlab:{ANA.id}")]
    lookups = [r for r in gitlab.requests if r.method == "GET" and r.path.endswith("/projects/team%2Fservice")]
    assert len(lookups) == 1, lookups


def test_without_gitlab_a_path_only_allow_list_counts_no_claimed_vote(
    serve: Callable[..., LiveServer], service_dsn: str, gitlab: FakeGitLab
) -> None:
    discussion, note = bot_thread(gitlab, PID)
    finding_on(service_dsn, PID, discussion, note)
    live = serve(gitlab_projects=PATH)  # no REVIEWLOOP_GITLAB_URL: nobody can confirm the claim
    answer = post_hook(
        live.url,
        emoji_hook(gitlab, PID, FIRST, note, name="thumbsdown", user=ANA),
        hook_headers("Emoji Hook", token=SECRET),
    )
    assert answer.json()["status"] == "ignored" and "cannot have GitLab confirm it" in answer.json()["reason"]
    assert rows(service_dsn, "SELECT count(*) FROM feedback") == [(0,)]


def test_when_gitlab_cannot_confirm_the_path_the_vote_waits_for_gitlabs_retry(
    serve: Callable[..., LiveServer], service_dsn: str, gitlab: FakeGitLab
) -> None:
    discussion, note = bot_thread(gitlab, PID)
    finding_on(service_dsn, PID, discussion, note)
    live = serve(gitlab_projects=PATH, gitlab_url=gitlab.url, gitlab_token=SecretStr(BOT_TOKEN))
    gitlab.fail_next(r"^/projects/team%2Fservice$", 503, count=None)
    body = emoji_hook(gitlab, PID, FIRST, note, name="thumbsdown", user=ANA)
    headers = hook_headers("Emoji Hook", token=SECRET)
    answer = post_hook(live.url, body, headers)
    assert answer.status_code == 503, answer.text
    assert rows(service_dsn, "SELECT count(*) FROM webhook_events") == [(0,)]
    assert rows(service_dsn, "SELECT count(*) FROM feedback") == [(0,)]
    gitlab.clear_faults()  # GitLab is back: its retry of the same delivery (same Idempotency-Key) counts
    again = post_hook(live.url, body, headers)
    assert again.json()["status"] == "processed", again.text
    assert rows(service_dsn, "SELECT user_key, value FROM feedback") == [(f"gitlab:{ANA.id}", -1)]
