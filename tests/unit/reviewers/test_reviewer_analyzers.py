"""Analyzers on hand-made files: each rule, its negative, and the added-lines-only boundary."""

from __future__ import annotations

import math

import pytest

from reviewers.analyzers.bandit import bandit_issues
from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.config_changes import (
    ValueChange,
    numeric_value,
    parse_setting,
    security_judgment,
    value_changes,
)
from reviewers.analyzers.patterns import line_rule_issues
from reviewers.analyzers.python_security import python_security_issues
from reviewers.analyzers.ruff import ruff_issues
from reviewers.analyzers.secrets import base62_crc32, looks_like_secret_value, secret_issues, shannon_entropy
from reviewers.kernel.contracts import DiffLine, FileChange, Hunk


def added_file(path: str, text: str) -> ChangedFile:
    """A new file: every line added."""
    lines = text.splitlines()
    hunk = Hunk(0, 0, 1, len(lines), "", tuple(DiffLine("add", t, None, n) for n, t in enumerate(lines, 1)))
    return ChangedFile(FileChange(path=path, old_path=path, status="added", hunks=(hunk,)), text)


def edited_file(path: str, text: str, *, added: set[int], removed: tuple[str, ...] = ()) -> ChangedFile:
    """A modified file whose `added` lines are new; `removed` lines were deleted just before the first."""
    lines = text.splitlines()
    diff_lines: list[DiffLine] = []
    for n, t in enumerate(lines, 1):
        if n == min(added):
            diff_lines += [DiffLine("del", r, 100 + i, None) for i, r in enumerate(removed)]
        diff_lines.append(DiffLine("add" if n in added else "context", t, None if n in added else n, n))
    hunk = Hunk(1, len(lines), 1, len(lines), "", tuple(diff_lines))
    return ChangedFile(FileChange(path=path, old_path=path, status="modified", hunks=(hunk,)), text)


def rules(issues: list) -> list[tuple[int, str]]:  # type: ignore[type-arg]
    return sorted((i.line, i.rule) for i in issues)


# --- secrets -------------------------------------------------------------------------------------


def test_entropy_by_hand() -> None:
    assert shannon_entropy("aabb") == 1.0
    assert shannon_entropy("abcd") == 2.0
    assert shannon_entropy("") == 0.0
    assert math.isclose(shannon_entropy("aab"), -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3)))


def test_a_vendor_token_that_names_itself_an_example_is_a_placeholder() -> None:
    # AWS's documented example key, as SDK test suites copy it; GitLab's docs write glpat-xxxx….
    # err-backend-slackv3's migration guide: a Slack prefix and a note of what goes there
    yours = "xoxb-" + "-".join(("YOUR", "BOT", "TOKEN", "HERE"))
    for line in ('"accessKeyId": "AKIAIOSFODNN7EXAMPLE",', 'TOKEN = "glpat-' + "x" * 20 + '"', f"'token': '{yours}',"):
        assert secret_issues(added_file("tests/cases.json", line + "\n")) == [], line
        assert secret_issues(added_file("app/settings.py", line + "\n")) == [], line


def test_a_vendor_token_with_a_made_up_body_is_a_placeholder() -> None:
    # slack-sdk's docs: a "never do this" box spelling the prefix with a body of repeated characters
    made_up = "xoxb-" + "111-222-" + "x" * 5
    for line in (f"token = '{made_up}'", f'SLACK_BOT_TOKEN="{made_up}" python myapp.py'):
        assert secret_issues(added_file("docs/content/installation.md", line + "\n")) == [], line
        assert secret_issues(added_file("app/settings.py", line + "\n")) == [], line


def test_the_github_checksum_matches_the_published_vectors() -> None:
    # Bodies and sums of expired tokens published to pin the format (therootcompany/base62-token.js):
    # CRC32 of the 30 random characters, base62 in the order 0-9, A-Z, a-z, padded with "0".

    assert base62_crc32("zQWBuTSOoRi4A9spHcVY5ncnsDkxkJ") == "0mLq17"
    assert base62_crc32("adE7dp8rHP6gUTuPwxLTZjZdtya3sV") == "0UQzQM"
    assert base62_crc32("") == "000000"


def test_a_github_or_npm_token_whose_checksum_fails_was_never_issued() -> None:

    body = "Zq8Lw3Rt7Yp2Xk9Mv4Nc6Bh1Gf5Dj0"
    issued = body + base62_crc32(body)
    made_up = body + ("aaaaaa" if base62_crc32(body) != "aaaaaa" else "bbbbbb")  # a docs page's invention
    for prefix in ("ghp_", "npm_"):
        leak = secret_issues(added_file("deploy/ci.py", f'TOKEN = "{prefix}{issued}"\n'))
        assert [(i.rule, i.severity) for i in leak] == [("secrets:known-prefix", "critical")], prefix
        assert secret_issues(added_file("deploy/ci.py", f'TOKEN = "{prefix}{made_up}"\n')) == [], prefix
    # one character changed in the body breaks the sum: an edited real token is not a credential either
    edited = ("Y" if body[0] != "Y" else "X") + issued[1:]
    assert secret_issues(added_file("deploy/ci.py", f'TOKEN = "ghp_{edited}"\n')) == []


def test_an_aws_key_id_without_its_secret_is_an_identifier_for_a_person() -> None:
    # s3-credentials' README: the tool's real output, the secret access key cut to "..."
    key_id = "AKIA" + "WXFXAIOZOYLZAEW5"
    shown = f'{{\n    "AccessKeyId": "{key_id}",\n    "SecretAccessKey": "...",\n}}\n'
    (issue,) = secret_issues(added_file("README.md", shown))
    assert (issue.rule, issue.confidence) == ("secrets:known-prefix", "low")  # listed, not posted
    # a git commit id beside it is no secret either
    assert secret_issues(added_file("README.md", shown + "fixed in " + "9f3a" * 10 + "\n"))[0].confidence == "low"
    secret = "wJa1rXUtnFEMI" + "K7MDENGbPxRfiCYz9x2Q8mLw3ab"  # 40 base64 characters of both cases
    leaked = shown.replace('"..."', f'"{secret}"')
    found = secret_issues(added_file("deploy/aws.json", leaked))
    assert ("secrets:known-prefix", "critical", "high") in [(i.rule, i.severity, i.confidence) for i in found]


def test_a_token_cut_short_for_the_reader_is_a_placeholder() -> None:
    # a config template's commented example (errbot): the value ends in an ellipsis, no token does
    slack = "xoxb-" + "4426949411" + "-aEM7"
    for line in (f'    # "token": "{slack}...",', f"SLACK_TOKEN = '{slack}…'"):
        assert secret_issues(added_file("bot/config-template.py", line + "\n")) == [], line
    whole = f'SLACK_TOKEN = "{slack}{"Qx8rT2" * 3}"'
    assert [i.rule for i in secret_issues(added_file("bot/config.py", whole + "\n"))] == ["secrets:known-prefix"]


@pytest.mark.parametrize(
    "line",
    [
        'KEY = "AKIAIOSFODNN7EXAMPLQ"',
        "token: ghp_" + "R8kq2Zt7Wm" + "Lp4Xv9Nc3Y" + "bH6sJ1dQ5f" + base62_crc32("R8kq2Zt7WmLp4Xv9Nc3YbH6sJ1dQ5f"),
        'GITLAB = "glpat-' + "Zk3vQ9wLm2Rt7YpB4nXc" + '"',
        "-----BEGIN RSA PRIVATE KEY-----",
        'const stripe = "sk_live_' + "4eC39HqLyjWDarjtT1zdp7dc" + '";',
    ],
)
def test_known_token_prefixes_are_critical_or_high(line: str) -> None:
    issues = secret_issues(added_file("conf/settings.py", line + "\n"))
    assert [i.rule for i in issues] == ["secrets:known-prefix"]
    assert issues[0].severity in ("critical", "high")
    assert line.split()[-1].strip('"') not in issues[0].title + issues[0].body  # never repeat the secret


def test_named_literal_needs_a_real_looking_value() -> None:
    text = "\n".join(
        [
            'db_password = "hunter2hunter2"',  # a real hard-coded password
            'API_TOKEN_ENV = "API_TOKEN"',  # the name of an environment variable
            'TOKEN_HEADER = "Authorization"',  # a header name
            'password = "changeme-example"',  # a placeholder
            'user = "x9$kLq2!"',  # not a credential name
        ]
    )
    assert rules(secret_issues(added_file("app/conf.py", text))) == [(1, "secrets:named-literal")]
    assert looks_like_secret_value("Zx81!kq9aa")
    assert not looks_like_secret_value("${DB_PASSWORD}")


def test_url_credentials_and_test_files() -> None:
    file = added_file("tests/test_db.py", 'DSN = "postgres://app:s3cr3tPw0rd@db:5432/app"\n')
    assert secret_issues(file, named_values=False) == []
    assert rules(secret_issues(file)) == [(1, "secrets:url-credentials")]


# --- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("SESSION_TTL = 3600", ("SESSION_TTL", "3600")),
        ("timeout: int = 30  # seconds", ("timeout", "30")),
        ("  session_ttl: 1h", ("session_ttl", "1h")),
        ('  "debug": true,', ("debug", "true")),
        ("export TOKEN_LIFETIME=900", ("TOKEN_LIFETIME", "900")),
        ("const MAX_AGE = 60;", ("MAX_AGE", "60")),
        ("if a == b:", None),
    ],
)
def test_parse_setting(line: str, expected: tuple[str, str] | None) -> None:
    assert parse_setting(line) == expected


def test_numeric_value_folds_constants_only() -> None:
    assert numeric_value("3600 * 24 * 30") == 2_592_000
    assert numeric_value("1_000 + 24") == 1024
    assert numeric_value("timedelta(days=1, hours=1)") == 90_000
    assert numeric_value('"30d"') == 30 * 86_400
    assert numeric_value("10 ** 10 ** 10") is None  # refused, not computed
    assert numeric_value("os.environ['X']") is None


def test_security_judgment_directions() -> None:
    def judge(key: str, old: str | None, new: str) -> str | None:
        judged = security_judgment(ValueChange(key, old, new, 1))
        return judged[0] if judged else None

    assert judge("SESSION_TTL", "3600", "3600 * 24 * 30") == "medium"
    assert judge("SESSION_TTL", "3600", "600") is None  # shorter sessions are not a risk
    assert judge("REQUEST_TIMEOUT", "10", "60") is None  # a timeout that guards no credential
    assert judge("PBKDF2_ITERATIONS", "600000", "1000") == "medium"
    assert judge("DEBUG", "False", "True") == "medium"
    assert judge("VERIFY_SSL", "True", "False") == "medium"
    assert judge("VERIFY_SSL", "False", "True") is None
    assert judge("CORS_ORIGINS", '["https://a.example"]', '["*"]') == "medium"
    assert judge("PAGE_SIZE", "10", "50") is None


def test_value_changes_pair_removed_and_added_lines() -> None:
    file = edited_file(
        "auth/session.py",
        "import time\n\nSESSION_TTL = 7200\nNEW_FLAG = 1\n",
        added={3, 4},
        removed=("SESSION_TTL = 3600",),
    )
    assert value_changes(file) == [
        ValueChange("SESSION_TTL", "3600", "7200", 3),
        ValueChange("NEW_FLAG", None, "1", 4),
    ]


# --- python syntax-tree checks ---------------------------------------------------------------------


def test_sql_through_a_variable_and_the_parameterised_form() -> None:
    text = (
        "def find(conn, name):\n"
        "    q = \"SELECT * FROM users WHERE name = '%s'\" % name\n"
        "    return conn.execute(q).fetchall()\n"
        "\n"
        "def find_ok(conn, name):\n"
        '    return conn.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchall()\n'
        "\n"
        "def find_concat(cur, table_id):\n"
        '    cur.execute("DELETE FROM t WHERE id = " + table_id)\n'
    )
    issues = python_security_issues(added_file("db.py", text)) or []
    # reported where the text is spliced; nobody is known to pass request data here, so a person looks first
    assert [(i.line, i.rule, i.confidence, i.cwe) for i in issues] == [
        (2, "python:sql-interpolation", "low", "CWE-89"),
        (9, "python:sql-interpolation", "low", "CWE-89"),
    ]


def test_shell_eval_and_deserialization() -> None:
    text = (
        "import os, subprocess, yaml\n"
        "import pickle as pk\n"
        "def go(name, blob, doc):\n"
        '    subprocess.run(f"ls {name}", shell=True)\n'
        '    subprocess.run("ls -l", shell=True)\n'
        '    subprocess.run(["ls", name])\n'
        "    os.system(name)\n"
        "    eval(blob)\n"
        '    eval("1 + 1")\n'
        "    pk.loads(blob)\n"
        "    yaml.load(doc)\n"
        "    yaml.load(doc, Loader=yaml.SafeLoader)\n"
    )
    assert rules(python_security_issues(added_file("x.py", text)) or []) == [
        (4, "python:shell-interpolation"),
        (7, "python:shell-interpolation"),
        (8, "python:code-eval"),
        (10, "python:unsafe-deserialization"),
        (11, "python:unsafe-deserialization"),
    ]


def test_path_traversal_needs_request_data_and_no_containment() -> None:
    text = (
        "import os\n"
        "from pathlib import Path\n"
        "from flask import request\n"
        "BASE = Path('/srv/files')\n"
        "def read() -> bytes:\n"
        "    return (BASE / request.args['name']).read_bytes()\n"
        "def read_checked() -> bytes:\n"
        "    p = (BASE / request.args['name']).resolve()\n"
        "    if not p.is_relative_to(BASE):\n"
        "        raise ValueError(p)\n"
        "    return p.read_bytes()\n"
        "def open_joined():\n"
        "    full = os.path.join('/data', request.form['file'])\n"
        "    with open(full) as fh:\n"
        "        return fh.read()\n"
        "def count() -> Path:\n"
        "    return BASE / str(int(request.args['n']))\n"
        "def via_variable():\n"
        "    rel = Path(request.args['doc'])\n"
        "    return (BASE / rel).read_text()\n"
        "def only_a_parameter(name: str) -> bytes:\n"
        "    return (BASE / name).read_bytes()\n"  # nobody known passes request data: silent
    )
    issues = python_security_issues(added_file("files.py", text)) or []
    assert [(i.line, i.rule, i.cwe) for i in issues] == [
        (6, "python:path-traversal", "CWE-22"),
        (13, "python:path-traversal", "CWE-22"),  # where the path is joined
        (20, "python:path-traversal", "CWE-22"),
    ]


def test_only_added_lines_are_reported() -> None:
    text = "import os\ndef a(x):\n    os.system(x)\ndef b(y):\n    os.system(y)\n"
    assert rules(python_security_issues(edited_file("m.py", text, added={5})) or []) == [
        (5, "python:shell-interpolation")
    ]


def test_unparseable_python_returns_none_for_the_line_rules() -> None:
    file = added_file("broken.py", 'def f(:\n    cur.execute(f"SELECT a FROM t WHERE b = {x}")\n')
    assert python_security_issues(file) is None
    assert rules(line_rule_issues(file, python_ast_done=False)) == [(2, "patterns:sql-interpolation")]


# --- line rules (any language) -----------------------------------------------------------------------


def test_line_rules_in_other_languages() -> None:
    text = "\n".join(
        [
            "const agent = new https.Agent({ rejectUnauthorized: false });",
            "db.query(`SELECT * FROM users WHERE id = ${req.params.id}`);",
            "// db.query(`SELECT * FROM users WHERE id = ${id}`);",
            'db.query("SELECT * FROM users WHERE id = $1", [id]);',
            "child_process.exec(`tar xf ${file}`);",
        ]
    )
    assert rules(line_rule_issues(added_file("web/app.js", text), python_ast_done=False)) == [
        (1, "patterns:tls-verify-disabled"),
        (2, "patterns:sql-interpolation"),
        (5, "patterns:shell-interpolation"),
    ]


def test_shell_rule_needs_a_variable_command() -> None:
    text = 'child_process.exec("ls -l");\nchild_process.exec(cmd);\nexecSync(`rm -rf ${dir}`);\n'
    assert rules(line_rule_issues(added_file("run.js", text), python_ast_done=False)) == [
        (2, "patterns:shell-interpolation"),
        (3, "patterns:shell-interpolation"),
    ]


def test_line_rules_skip_data_sized_lines() -> None:
    long_line = "x = '" + "a" * 600 + "'; db.query(`SELECT * FROM t WHERE id = ${id}`)"
    assert line_rule_issues(added_file("data.js", long_line + "\n"), python_ast_done=False) == []


def test_go_tls_and_python_rules_skipped_when_tree_ran() -> None:
    go = added_file("client.go", "cfg := &tls.Config{InsecureSkipVerify: true}\n")
    assert rules(line_rule_issues(go, python_ast_done=False)) == [(1, "patterns:tls-verify-disabled")]
    py = added_file("x.py", "pickle.loads(data)\nrequests.get(u, verify=False)\n")
    assert rules(line_rule_issues(py, python_ast_done=True)) == []  # both are the syntax tree's
    assert rules(line_rule_issues(py, python_ast_done=False)) == [
        (1, "patterns:unsafe-deserialization"),
        (2, "patterns:tls-verify-disabled"),
    ]


# --- external analyzers ------------------------------------------------------------------------------


def test_ruff_reports_defects_on_added_lines_only() -> None:
    text = "import os\nimport sys\n\ndef run(job, seen=[]):\n    try:\n        job()\n    except:\n        pass\n"
    file = edited_file("jobs/run.py", text, added={2, 4, 7})
    assert rules(ruff_issues(file)) == [(2, "ruff:F401"), (4, "ruff:B006"), (7, "ruff:E722"), (7, "ruff:S110")]


def test_ruff_skips_whole_file_rules_on_rebuilt_text() -> None:
    # Lines 1-3 are not in the diff (blank in a rebuilt file): the import of `os` is out of view.
    text = "\n\n\ndef f(p):\n    return os.path.join(p, 'x')\n"
    shown = {4, 5}
    hunk = Hunk(4, 0, 4, 2, "", tuple(DiffLine("add", text.splitlines()[n - 1], None, n) for n in sorted(shown)))
    file = ChangedFile(FileChange("m.py", "m.py", "modified", (hunk,)), text)
    assert file.partial
    assert ruff_issues(file) == []
    assert not added_file("m.py", "import os\n").partial


def test_bandit_s_checks_keep_added_lines() -> None:
    text = "import requests\n\ndef get(u):\n    return requests.get(u, timeout=5, verify=False)\n"
    issues = bandit_issues(edited_file("client.py", text, added={4}))
    assert [(i.line, i.rule, i.kind) for i in issues] == [(4, "bandit:B501", "tls-verify")]
    assert bandit_issues(edited_file("client.py", text, added={1})) == []


def test_a_markdown_table_row_is_not_a_template_safe_filter() -> None:
    table = 'ROW = "| class | vulnerable | safe | TPR |"\n'
    template = "<p>{{ comment.body|safe }}</p>\n"
    assert rules(line_rule_issues(added_file("bench/table.py", table), python_ast_done=True)) == []
    assert rules(line_rule_issues(added_file("web/page.html", template), python_ast_done=False)) == [
        (1, "patterns:raw-html")
    ]


def test_every_vendor_token_match_contains_one_of_its_markers() -> None:
    """The scan skips the token search on a line with none of the markers, so a pattern whose
    matches could avoid every marker would silently stop finding tokens. Each pattern's alternatives
    and character classes are walked by hand-written samples, one per branch."""
    from reviewers.analyzers.secrets import KNOWN_TOKENS, scan_secrets

    body = "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4Y5z6"
    checksummed = body[:30] + base62_crc32(body[:30])  # GitHub's and npm's: a made-up sum is a placeholder
    samples = {
        "Stripe live secret key": ["sk_live_" + body[:24], "rk_live_" + body[:24]],
        "AWS access key id": ["AKIA" + "ABCDEFGHIJKLMNOP", "ASIA" + "ABCDEFGHIJKLMNOP"],
        "GitHub token": [f"gh{c}_" + checksummed for c in "pousr"] + ["ghr_" + body[:40]],
        "GitHub fine-grained token": ["github_pat_" + body[:30]],
        "GitLab token": [f"gl{k}-" + body[:24] for k in ("pat", "rt", "dt", "ptt", "cbt")],
        "Slack token": [f"xox{c}-" + body[:20] for c in "abprs"],
        "npm access token": ["npm_" + checksummed],
        "Google API key": ["AIza" + body[:35]],
        "OpenAI-style API key": ["sk-" + body[:40], "sk-proj-" + body[:40]],
        "SendGrid API key": ["SG." + body[:22] + "." + body[:43]],
        "private key": [f"-----BEGIN {k}PRIVATE KEY-----" for k in ("", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED ")],
        "JSON Web Token": ["eyJ" + body[:12] + ".eyJ" + body[:12] + "." + body[:12]],
    }
    assert set(samples) == {t.name for t in KNOWN_TOKENS}
    for token in KNOWN_TOKENS:
        for sample in samples[token.name]:
            match = token.pattern.search(f'value = "{sample}"')
            assert match is not None, sample
            assert any(m in match.group(0) for m in token.markers), (token.name, sample)
            found = scan_secrets(added_file("app/keys.py", f'KEY = "{sample}"\n')).issues
            assert found and found[0].rule == "secrets:known-prefix", (token.name, sample)


def test_ruby_backticks_run_a_shell_but_the_same_text_in_a_config_string_does_not() -> None:
    ruby = "def purge(dir)\n  `rm -rf #{dir}`\nend\n"
    assert rules(line_rule_issues(added_file("lib/purge.rb", ruby), python_ast_done=False)) == [
        (2, "patterns:shell-interpolation")
    ]
    towncrier = '[tool.towncrier]\nissue_format = "`#{issue} <https://example.org/issues/{issue}>`_"\n'
    for path in ("pyproject.toml", "pyproject.yoml", "changes.yaml"):
        assert line_rule_issues(added_file(path, towncrier), python_ast_done=False) == [], path


def test_a_token_the_file_already_held_on_a_kept_line_is_not_this_changes_leak() -> None:
    token = "glpat-" + "JVNSESs8EwWRx5yDxM5q"
    text = f"gq = gitlab.GraphQL(token='{token}')\nasync_gq = gitlab.AsyncGraphQL(token='{token}')\n"
    assert secret_issues(edited_file("docs/api.rst", text, added={2})) == []
    # the first time the value appears, it is reported
    assert [i.rule for i in secret_issues(added_file("docs/api.rst", text))] == ["secrets:known-prefix"] * 2
