"""The comment budget over real HTTP: python-gitlab against the GitLab-compatible loopback server,
the whole review on real Postgres. Eleven REAL findings get ten threads, ranked by severity; the
eleventh is listed in the summary note; a review of a new push posts nothing twice."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from psycopg.rows import dict_row

from agent.diff import DiffIndex
from agent.gitlab.client import GitLabPlatform
from agent.gitlab.publisher import FindingToPublish, fingerprint_of, publish_review
from agent.gitlab.review import ReviewDeps, review_gitlab_merge_request
from agent.repo_config import parse_repo_config
from agent.sanitize import SUMMARY_MARKER
from agent.session import prepare_database
from agent.store.db import open_pool
from reviewers.kernel.contracts import Finding

PID, IID = 12, 7


def injections(prefix: str, count: int) -> str:
    """`count` functions, each splicing a request parameter into SQL (one high, REAL finding each)."""
    return "from flask import request\n\n\n" + "".join(
        f"def {prefix}{i}(cur):\n    name = request.args['name']\n"
        f"    cur.execute(f\"SELECT {i} FROM t WHERE n = '{{name}}'\")\n\n\n"
        for i in range(count)
    )


# Five per file: a reviewer reports at most five findings on one file. The medium finding sits in
# the file that sorts first, so only ranking by severity keeps it out of the ten threads.
# The medium one is an outbound request to a URL from the request (server-side request forgery).
FETCH = "import requests\nfrom flask import request\n\n\ndef fetch():\n    return requests.get(request.args['url'], timeout=5).text\n"
HEAD = {
    ".reviewloop.toml": 'reviewers = ["security"]\n',
    "svc/__init__.py": "",
    "svc/aa_fetch.py": FETCH,
    "svc/bb.py": injections("b", 5),
    "svc/cc.py": injections("c", 5),
}


@pytest.fixture
def fake() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_project(PID, "team/budget")
        # the settings are the target branch's (issue 40): the base carries them
        base = {"svc/__init__.py": "", ".reviewloop.toml": HEAD[".reviewloop.toml"]}
        server.add_merge_request(PID, IID, files_base=base, files_head=HEAD, title="Queries by name")
        yield server


def review(fake: FakeGitLab, dsn: str) -> int:
    with open_pool(dsn) as pool:
        # posting="all": the budget is the point here, and the medium SSRF finding is no injection class
        # that posts by default (agent.verdicts.posting)
        platform = GitLabPlatform(fake.url, BOT_TOKEN, timeout=5, max_retries=1)
        deps = ReviewDeps(pool=pool, dsn=dsn, platform=platform, posting="all")
        return review_gitlab_merge_request(deps, project=str(PID), mr_iid=IID, head_sha=None)


def threads(fake: FakeGitLab) -> list[int]:
    """new_line of every positioned thread on the MR."""
    return sorted(
        d.notes[0].position["new_line"] for d in fake.discussions(PID, IID) if d.notes[0].position is not None
    )


def discussion_posts(fake: FakeGitLab) -> int:
    return sum(1 for r in fake.requests if r.method == "POST" and r.path.endswith("/discussions"))


def test_eleven_real_findings_get_ten_threads_and_the_rest_is_in_the_summary(fake: FakeGitLab, db_dsn: str) -> None:
    prepare_database(db_dsn)
    review_id = review(fake, db_dsn)
    with psycopg.connect(db_dsn, row_factory=dict_row) as conn:
        real = conn.execute(
            "SELECT * FROM findings WHERE review_id = %s AND verdict = 'REAL' ORDER BY path, line", (review_id,)
        ).fetchall()
    assert len(real) == 11, [(f["path"], f["line"], f["rule"]) for f in real]
    posted = [f for f in real if f["discussion_id"]]
    [left] = [f for f in real if not f["discussion_id"]]
    assert len(posted) == 10 and {f["severity"] for f in posted} == {"high"}
    assert (left["path"], left["severity"]) == ("svc/aa_fetch.py", "medium")
    assert len(threads(fake)) == 10 and discussion_posts(fake) == 10
    [summary] = [n for n in fake.notes(PID, IID) if SUMMARY_MARKER in n.body]
    assert "10 posted as threads, 1 listed below (comment budget)" in summary.body
    assert "**1 more finding(s)** past this merge request's comment budget of 10 threads" in summary.body
    assert f"`svc/aa_fetch.py:{left['line']}` medium · security · CWE-918 · {left['title']}" in summary.body

    # A new push touching every reviewed file: the review runs again and posts nothing twice.
    fake.push(
        PID, IID, {**HEAD, **{p: f"{HEAD[p]}# reviewed\n" for p in ("svc/aa_fetch.py", "svc/bb.py", "svc/cc.py")}}
    )
    review(fake, db_dsn)
    assert discussion_posts(fake) == 10 and len(threads(fake)) == 10
    [summary] = [n for n in fake.notes(PID, IID) if SUMMARY_MARKER in n.body]
    assert "**1 more finding(s)** past this merge request's comment budget of 10 threads" in summary.body
    assert f"`svc/aa_fetch.py:{left['line']}`" in summary.body


def finding(line: int, confidence: str) -> Finding:
    f = Finding.model_validate(
        {"path": "svc/api.py", "line": line, "end_line": line, "category": "security", "severity": "high",
         "title": f"problem {line}", "body": "b", "evidence": f"line {line}", "reviewer": "security",
         "rule": "llm", "confidence": confidence}
    )  # fmt: skip
    return f.model_copy(update={"fingerprint": fingerprint_of(f)})


def test_a_configured_budget_goes_to_the_most_confident_findings_first(fake: FakeGitLab) -> None:
    budget = parse_repo_config("max_discussions = 2\n").max_discussions
    platform = GitLabPlatform(fake.url, BOT_TOKEN, timeout=5, max_retries=1)
    versions = platform.latest_version(PID, IID)
    index = DiffIndex(platform.diffs(PID, IID, versions=versions).files)
    items = [FindingToPublish(n, finding(n, c), "REAL", "ok") for n, c in ((1, "low"), (2, "medium"), (3, "high"))]
    result = publish_review(
        platform, project=PID, mr_iid=IID, versions=versions, diff_index=index, findings=items, existing={},
        summary="Reviewed.", record_posted=lambda *a: None, max_discussions=budget,
    )  # fmt: skip
    assert [p.finding_id for p in result.posted] == [3, 2] and result.over_budget == [1]
    assert budget == 2 and parse_repo_config("").max_discussions == 10
