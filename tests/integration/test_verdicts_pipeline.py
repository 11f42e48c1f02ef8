"""Every non-REAL verdict through the real pipeline: a local git range reviewed by the graph on
real Postgres, the analyzers as they are, and (where a model is involved) an OpenAI-compatible
server on loopback that scripts the model's moves and records what the judge was shown."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from fakes.openai_server import FakeOpenAIServer, FakeReply
from psycopg.rows import dict_row

from agent.context import ReviewRequest
from agent.llm.factory import make_llm
from agent.pipeline import run_review
from agent.runtime import Runtime
from agent.session import prepare_database
from agent.store.db import open_pool
from agent.store.feedback import record_vote
from reviewers.kernel.contracts import LLMPort

pytest_plugins = ("fakes.openai_fixtures",)

PROJECT = "team/shop"
CLIENT_BASE = (
    "class Client:\n"
    "    def model_name(self) -> str:\n"
    '        return "m"\n\n'
    "    def ask(self, question: str) -> str:\n"
    "        return question\n"
)
CLIENT_HEAD = (
    "from pkg.backend import Backend\n\n\n"
    "class Client(Backend):\n"
    "    def ask(self, question: str) -> str:\n"
    "        return question\n"
)
BACKEND = 'class Backend:\n    def model_name(self) -> str:\n        return "m"\n'
CLIENT_TEST = "from pkg.client import Client\n\n\ndef test_name() -> None:\n    assert Client().model_name() == 'm'\n"
CONSTANT_SQL = '    return cur.execute(f"SELECT count(*) FROM {TABLE}").fetchone()'
DATA_SQL = "    return cur.execute(f\"SELECT * FROM {TABLE} WHERE name = '{name}'\").fetchall()"
FIND = "def find(cur):"  # the name comes from the request: a real source, so the analyzer's finding is REAL
DB = (
    f'from flask import request\n\nTABLE = "users"\n\n\ndef count(cur):\n{CONSTANT_SQL}\n\n\n'
    f"{FIND}\n    name = request.args['name']\n{DATA_SQL}\n"
)


def git_repo(root: Path, *commits: tuple[str, dict[str, str]]) -> Path:
    """A repository with one tagged commit per (tag, files written) pair."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    root.mkdir(parents=True, exist_ok=True)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    for tag, files in commits:
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        git("add", "-A")
        git("commit", "-q", "--allow-empty", "-m", tag)
        git("tag", tag)
    return root


def review(dsn: str, repo: Path, *, base: str, head: str, llm: LLMPort | None = None) -> list[dict[str, Any]]:
    """Review base..head through the graph; the stored findings of that review."""
    prepare_database(dsn)
    request = ReviewRequest(source="local", project=PROJECT, title="change", repo_path=str(repo), base=base, head=head)
    with open_pool(dsn) as pool:
        outcome = run_review(Runtime(pool=pool, llm=llm), request, dsn=dsn)
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM findings WHERE review_id = %s ORDER BY id", (outcome.review_id,)).fetchall()


def only(findings: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    [row] = [f for f in findings if all(f[k] == v for k, v in match.items())]
    return row


def line_in(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if needle in line)


def test_claims_the_head_tree_contradicts_are_false_positives(
    db_dsn: str, tmp_path: Path, openai_server: FakeOpenAIServer
) -> None:
    """A scripted model claims a method was removed (it moved to a base class) and an injection into
    a query built from a constant: both FALSE_POSITIVE with the code that contradicts them. The rules
    make neither claim themselves; the analyzer's finding on the query built from request data stays REAL."""
    repo = git_repo(
        tmp_path / "repo",
        ("base", {"pkg/__init__.py": "", "pkg/client.py": CLIENT_BASE, "tests/test_client.py": CLIENT_TEST}),
        ("head", {"pkg/client.py": CLIENT_HEAD, "pkg/backend.py": BACKEND, "pkg/db.py": DB}),
    )
    count_line, data_line = line_in(DB, "count(*)"), line_in(DB, "WHERE name")
    plan = [{"reviewer": "security", "focus_paths": ["pkg/client.py", "pkg/db.py"], "step_budget": 6}]
    moves: list[dict[str, Any]] = [
        {"tool": "run_analyzer", "path": "pkg/db.py"},
        {"tool": "report", "path": "pkg/client.py", "line": line_in(CLIENT_HEAD, "class Client"), "severity": "high",
         "title": "`model_name` was removed but tests still use it",
         "body": "tests/test_client.py calls `model_name`.", "evidence": "class Client(Backend):"},
        {"tool": "report", "path": "pkg/db.py", "line": count_line, "severity": "high",
         "title": "SQL injection in count", "body": "The table name is formatted into the query.",
         "evidence": CONSTANT_SQL.strip()},
        {"tool": "finish"},
    ]  # fmt: skip
    openai_server.enqueue(
        FakeReply.json({"change_type": "feature", "risk_areas": [], "plan": plan, "stop_condition": "done"}),
        *[FakeReply.json(m) for m in moves],
        *[FakeReply.json({"verdict": "REAL", "reason": "the parameter reaches the query"}) for _ in range(4)],
    )
    llm = make_llm(base_url=openai_server.base_url, model="fake-model", api_key=None, model_path=None,
                   timeout_s=10, max_retries=0, max_output_tokens=512)  # fmt: skip
    findings = review(db_dsn, repo, base="base", head="head", llm=llm)
    assert not [f for f in findings if f["rule"] == "tests:removed-symbol"], "the rule checks the head tree itself"
    gone = only(findings, rule="llm", path="pkg/client.py")
    assert (gone["verdict"], gone["verdict_reason"]) == (
        "FALSE_POSITIVE",
        "`model_name` is still defined at head in a module pkg/client.py uses: "
        "pkg/backend.py:2 `def model_name(self) -> str:`",
    )
    constant = only(findings, rule="llm", path="pkg/db.py", line=count_line)
    assert (constant["verdict"], constant["verdict_reason"]) == (
        "FALSE_POSITIVE",
        f"the value reaching `execute()` at pkg/db.py:{count_line} is built only from constants: "
        f"`TABLE` (line {line_in(DB, 'TABLE =')})",
    )
    data = only(findings, path="pkg/db.py", line=data_line, category="security")
    assert data["rule"] != "llm" and data["verdict"] == "REAL", data["verdict_reason"]


def test_a_high_security_rule_three_people_rejected_goes_to_a_human_until_someone_likes_it(
    db_dsn: str, tmp_path: Path
) -> None:
    """Three people's 👎 and no 👍 on a rule's findings in this project (feedback rows in Postgres) send
    its next finding, on new code, to a human with the count (a high security finding is never dropped
    on votes alone); one 👍 lifts it."""
    # every query splices a request parameter: a real source, so each finding is REAL before the votes
    first = {f"svc/q{i}.py": f"from flask import request\n\n\ndef q{i}(cur):\n    name = request.args['name']\n"
                             f"    cur.execute(f\"SELECT {i} FROM t WHERE n = '{{name}}'\")\n"
             for i in range(3)}  # fmt: skip
    later = ("from flask import request\n\n\ndef late(cur):\n    city = request.args['city']\n"
             "    cur.execute(f\"SELECT * FROM t WHERE c = '{city}'\")\n")  # fmt: skip
    repo = git_repo(
        tmp_path / "repo",
        ("base", {"svc/__init__.py": ""}),
        ("one", first),
        ("two", {"svc/late.py": later}),
        ("three", {"svc/later.py": later.replace("late(", "later(")}),
    )
    posted = [f for f in review(db_dsn, repo, base="base", head="one") if f["category"] == "security"]
    assert len(posted) == 3 and {f["verdict"] for f in posted} == {"REAL"}
    rule = posted[0]["rule"]
    with open_pool(db_dsn) as pool:
        for i, f in enumerate(posted):
            record_vote(pool, f["id"], user_key=f"dev{i}", source="emoji", value=-1)
    late = only(review(db_dsn, repo, base="one", head="two"), path="svc/late.py", category="security")
    assert late["rule"] == rule
    assert (late["severity"], late["verdict"], late["verdict_reason"]) == (
        "high",
        "NEEDS_HUMAN_REVIEW",
        f"3 people rejected this rule before ({rule} in svc/** on this project; nobody accepted it);"
        " a high security finding is not dropped on votes alone: a human decides",
    )
    with open_pool(db_dsn) as pool:
        record_vote(pool, late["id"], user_key="dev9", source="dashboard", value=1)
    again = only(review(db_dsn, repo, base="two", head="three"), path="svc/later.py", category="security")
    assert again["verdict"] == "REAL", again["verdict_reason"]


AMOUNTS = "def parse_amount(text: str) -> int:\n    whole, _, cents = text.partition('.')\n    return int(whole) * 100 + int(cents or 0)\n"
AMOUNTS_TEST = (
    "from pkg.amounts import parse_amount\n\n\ndef test_cents() -> None:\n    assert parse_amount('1.5') == 105\n"
)


def test_a_models_findings_are_anchored_folded_and_checked(
    db_dsn: str, tmp_path: Path, openai_server: FakeOpenAIServer
) -> None:
    """A scripted model (loopback, real client) runs the analyzer, then reports: the SQL injection
    two lines off (moved onto its evidence, then folded into the analyzer's report of it), "no test
    exercises parse_amount" (a test does), code that is not in the file, and blank evidence. The judge is shown
    the hunk and the evidence."""
    repo = git_repo(
        tmp_path / "repo",
        ("base", {"pkg/__init__.py": ""}),
        ("head", {"pkg/db.py": DB, "pkg/amounts.py": AMOUNTS, "tests/test_amounts.py": AMOUNTS_TEST}),
    )
    sql_line = line_in(DB, "WHERE name")
    plan = [{"reviewer": "security", "focus_paths": ["pkg/db.py", "pkg/amounts.py"], "step_budget": 6}]
    moves: list[dict[str, Any]] = [
        {"tool": "run_analyzer", "path": "pkg/db.py"},
        {"tool": "report", "path": "pkg/db.py", "line": sql_line - 2, "severity": "high",
         "title": "The name reaches the SQL text", "body": "Use a parameter.", "evidence": DATA_SQL.strip()},
        {"tool": "report", "path": "pkg/amounts.py", "line": 1, "severity": "medium",
         "title": "No test exercises parse_amount", "body": "`parse_amount` has no test.",
         "evidence": "def parse_amount(text: str) -> int:"},
        {"tool": "report", "path": "pkg/db.py", "line": 2, "severity": "high", "title": "eval of input",
         "body": "eval", "evidence": "eval(request.args['q'])"},
        {"tool": "report", "path": "pkg/db.py", "line": 4, "severity": "high", "title": "blank", "body": "b",
         "evidence": "   \n\t"},
        {"tool": "finish"},
    ]  # fmt: skip
    openai_server.enqueue(
        FakeReply.json({"change_type": "feature", "risk_areas": [], "plan": plan, "stop_condition": "done"}),
        *[FakeReply.json(m) for m in moves],
        *[FakeReply.json({"verdict": "REAL", "reason": "the parameter reaches the query"}) for _ in range(4)],
    )
    llm = make_llm(base_url=openai_server.base_url, model="fake-model", api_key=None, model_path=None,
                   timeout_s=10, max_retries=0, max_output_tokens=512)  # fmt: skip
    findings = review(db_dsn, repo, base="base", head="head", llm=llm)

    by_model = [f for f in findings if f["rule"] == "llm"]
    echo = only(by_model, path="pkg/db.py", title="The name reaches the SQL text")
    assert echo["line"] == sql_line, "the model's finding was not moved onto its evidence"
    analyzer = only(findings, path="pkg/db.py", line=sql_line, verdict="REAL")
    assert analyzer["rule"] != "llm" and "also reported by llm" in analyzer["verdict_reason"]
    assert (echo["verdict"], echo["verdict_reason"]) == (
        "DUPLICATE",
        f"same root cause as {analyzer['rule']} at pkg/db.py:{sql_line}; kept as one finding there, "
        "also reported by llm",
    )
    tested = only(by_model, path="pkg/amounts.py")
    assert (tested["verdict"], tested["verdict_reason"]) == (
        "FALSE_POSITIVE",
        "a test at head does reference it: tests/test_amounts.py:1 uses `parse_amount`",
    )
    invented = only(by_model, title="eval of input")
    assert invented["verdict"] == "FALSE_POSITIVE"
    assert (
        invented["verdict_reason"]
        == "evidence not found: `eval(request.args['q'])` is not in pkg/db.py at the head commit"
    )

    blank = only(by_model, title="blank")
    assert (blank["verdict"], blank["verdict_reason"]) == (
        "FALSE_POSITIVE",
        "the finding quotes no code (its evidence is empty), so nothing anchors it",
    )

    judged = [r for r in openai_server.chat_requests if "code-review finding" in r.messages[0]["content"]]
    assert len(judged) == 1, "only the one finding that passed every check is judged"
    shown = judged[0].messages[-1]["content"]
    assert f"line {sql_line}" in shown and "pkg/db.py" in shown and DATA_SQL.strip() in shown  # the evidence
    assert f"+{FIND}" in shown and f"+{DATA_SQL}" in shown and "@@ -0 +1 @@" in shown  # the hunk
