"""Nothing found is lost (issue 40), through `reviewloop review --diff`: no per-file cap drops a
finding, a merged finding names each member and keeps each one's fix, and a key id is judged on
its own text, not its neighbour's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app

SEVEN_FLOWS = """import os
import pickle
import sqlite3
import subprocess

import yaml
from flask import Flask, request

app = Flask(__name__)


@app.route("/run")
def run_command():
    cmd = request.args["cmd"]
    return str(os.system(cmd))


@app.route("/shell")
def run_shell():
    target = request.args["host"]
    return subprocess.check_output("ping -c 1 " + target, shell=True)


@app.route("/calc")
def calculate():
    expr = request.args["expr"]
    return str(eval(expr))


@app.route("/load")
def load_state():
    blob = request.get_data()
    return str(pickle.loads(blob))


@app.route("/config")
def load_config():
    doc = request.get_data()
    return str(yaml.load(doc, Loader=yaml.Loader))


@app.route("/user")
def find_user():
    name = request.args["name"]
    conn = sqlite3.connect("app.db")
    return str(conn.execute(f"SELECT * FROM users WHERE name = '{name}'").fetchall())


@app.route("/exec")
def run_code():
    code = request.form["code"]
    exec(code)
    return "ok"
"""
# Made-up tokens of the vendors' shapes (random bodies, not anyone's credentials).
SLACK = "xoxb-" + "2849174612-5918273645123-Kq8vN2wR7tYc4HzK9mPd3XsJ"
STRIPE = "sk_" + "live_51Hq8Vn2LwR7tYc4HzK9mPd3XsJf6Gb1Ue5Na0RiTlW"
ADJACENT = f"""import os
import sys


SLACK_TOKEN = "{SLACK}"
STRIPE_KEY = "{STRIPE}"


def answer():
    return 42
"""
AWS_ID = "AKIA" + "2E0A8F3B244C9986"
AWS_BESIDE_PLACEHOLDER = f"""import boto3

AWS_ACCESS_KEY_ID = "{AWS_ID}"
AWS_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def client():
    return boto3.client("s3", aws_access_key_id=AWS_ACCESS_KEY_ID, aws_secret_access_key=AWS_SECRET_ACCESS_KEY)
"""


def new_file_diff(path: str, text: str) -> str:
    lines = text.splitlines()
    head = [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}"]
    return "\n".join([*head, f"@@ -0,0 +1,{len(lines)} @@", *("+" + line for line in lines)]) + "\n"


@pytest.fixture
def review(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)

    def run(path: str, text: str, *extra: str) -> dict[str, Any]:
        patch = tmp_path / "change.patch"
        patch.write_text(new_file_diff(path, text), encoding="utf-8")
        result = CliRunner().invoke(app, ["review", "--diff", str(patch), "--no-store", "--format", "json", *extra])
        assert result.exit_code == 0, result.output
        doc: dict[str, Any] = json.loads(result.stdout)
        return doc

    return run


def test_a_file_with_seven_request_to_sink_flows_reports_all_seven(review: Any) -> None:
    doc = review("app/views.py", SEVEN_FLOWS)
    flows = {(f["line"], f["rule"]) for f in doc["findings"] if f["category"] == "security"}
    assert {line for line, _ in flows} == {15, 21, 27, 33, 39, 46, 52}, flows
    assert (46, "python:sql-interpolation") in flows  # the sixth and seventh, cut by the old cap of five
    assert (52, "python:code-eval") in flows  # the exec(), the other one cut
    assert all(f["verdict"] == "REAL" for f in doc["findings"] if f["category"] == "security")
    assert doc["complete"] is True  # nothing was cut


def test_a_slack_token_beside_a_stripe_key_names_both(review: Any) -> None:
    doc = review("app/keys.py", ADJACENT, "--all")
    secrets = [f for f in doc["findings"] if (f["rule"] or "").startswith("secrets:")]
    said = " ".join(f"{f['title']} {f['body']}" for f in secrets)
    assert "Slack token" in said and "Stripe live secret key" in said
    # each credential has a place: its own finding, or a line named in the merged one's body
    for line in (5, 6):
        assert any(f["line"] == line or f"line {line}:" in f["body"] for f in secrets), line


def test_two_adjacent_unused_imports_are_both_named_and_one_fix_removes_both(review: Any) -> None:
    doc = review("app/keys.py", ADJACENT, "--all")
    [imports] = [f for f in doc["findings"] if f["rule"] == "ruff:F401"]
    assert "`os`" in imports["title"] + imports["body"] and "`sys`" in imports["title"] + imports["body"]
    assert imports["suggestion"] == {
        "start_line": 1,
        "end_line": 2,
        "original": "import os\nimport sys",
        "replacement": "",
    }


def test_an_aws_key_id_beside_a_placeholder_secret_is_posted_not_only_listed(review: Any) -> None:
    doc = review("app/storage.py", AWS_BESIDE_PLACEHOLDER)
    [key] = [f for f in doc["findings"] if f["line"] == 3 and f["rule"] == "secrets:known-prefix"]
    assert key["severity"] == "critical"
    assert key["verdict"] == "REAL", key["verdict_reason"]


STYLE_ONLY = (
    "def keys(items):\n    out = []\n    for i, k, v in items:\n        out.append(v)\n    return out\n\n\n"
    "def label():\n    return f'none'\n"
)


def test_findings_under_the_severity_floor_are_counted_not_silently_dropped(review: Any) -> None:
    doc = review("lib/style.py", STYLE_ONLY, "--all")
    assert doc["findings"] == []  # info findings are under the default floor ("low")...
    assert doc["below_min_severity"] == {"min_severity": "low", "count": 2}  # ...and the report says how many
