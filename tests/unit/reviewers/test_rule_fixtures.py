"""Each rule family on fixtures written for it: a true positive beside the near miss a noisy rule
would also report. Fixtures are small repositories (base and head trees) reviewed without a model."""

from __future__ import annotations

from typing import Any

import pytest

from reviewers import run_reviewer
from reviewers.kernel.contracts import PlanItem, ReviewContext, ReviewerName, ReviewerResult
from reviewers.paths import is_code_path, is_config_path, is_fixture_path, is_test_path, language_of


def review(name: ReviewerName, context: ReviewContext) -> ReviewerResult:
    return run_reviewer(name, context, PlanItem(reviewer=name, step_budget=20), None)


def rules_of(result: ReviewerResult) -> list[tuple[str, int, str]]:
    return [(f.path, f.line, f.rule) for f in result.findings]


# --- paths ------------------------------------------------------------------------------------------


def test_paths_classify_language_tests_fixtures_and_configuration() -> None:
    assert language_of(".env") == language_of("deploy/.env.production") == "dotenv"
    assert language_of("setup.cfg") == "ini" and language_of("Dockerfile.dev") == "dockerfile"
    assert is_test_path("pkg/tests/helpers.py") and is_test_path("web/cart.spec.ts") and not is_test_path("contest.py")
    assert is_fixture_path("pkg/fixtures/orders.py") and not is_code_path("pkg/fixtures/orders.py")
    assert is_config_path("shop/settings.py") and is_config_path("conf/app.yaml") and is_config_path(".env")
    assert not is_config_path("shop/session.py") and is_code_path("shop/session.py")


# --- test impact ------------------------------------------------------------------------------------

LEDGER = "def balance(entries):\n    total = 0\n    for e in entries:\n        total += e\n    return total\n"
LEDGER_TEST = "from books.ledger import balance\n\n\ndef test_balance():\n    assert balance([1, 2]) == 3\n"
NEW_LOGIC = (
    "def overdraft(entries, limit):\n    owed = -sum(entries)\n    return max(0, owed - limit)\n\n\n"
    "def interest(entries, rate):\n    if not entries:\n        return 0\n    return sum(entries) * rate\n"
)


def test_untested_new_code_is_one_grouped_finding_where_neighbours_are_tested(build_context: Any) -> None:
    base = {"books/ledger.py": LEDGER, "tests/test_ledger.py": LEDGER_TEST}
    head = {**base, "books/ledger.py": LEDGER + "\n\n" + NEW_LOGIC, "books/fees.py": NEW_LOGIC}
    result = review("test_impact", build_context(base, head))
    assert [r for _, _, r in rules_of(result)] == ["tests:untested-new"]  # one for the whole MR
    finding = result.findings[0]
    assert finding.severity == "low" and finding.path == "books/fees.py"  # the first file in the diff
    assert "`overdraft`, `interest`, `overdraft` (books/ledger.py), `interest` (books/ledger.py)" in finding.body


@pytest.mark.parametrize(
    ("added", "why"),
    [
        ("def wrapper(entries):\n    return balance(entries)\n", "a one-statement wrapper"),
        ("def stub(entries):\n    ...\n", "a stub"),
        # overdraft and interest have logic but report calls them, and report is a wrapper
        (NEW_LOGIC + "\n\ndef report(e):\n    return overdraft(e, 0) + interest(e, 1)\n", "called by other code"),
    ],
)
def test_untested_new_code_near_misses(build_context: Any, added: str, why: str) -> None:
    base = {"books/ledger.py": LEDGER, "tests/test_ledger.py": LEDGER_TEST}
    head = {**base, "books/ledger.py": LEDGER + "\n\n" + added}
    assert rules_of(review("test_impact", build_context(base, head))) == [], why


def test_untested_new_code_is_silent_without_tests_nearby_and_on_tests_and_fixtures(build_context: Any) -> None:
    untested_repo = review(
        "test_impact", build_context({"books/ledger.py": LEDGER}, {"books/ledger.py": LEDGER + "\n\n" + NEW_LOGIC})
    )
    assert untested_repo.findings == []  # a repository without tests has made its choice
    base = {"books/ledger.py": LEDGER, "tests/test_ledger.py": LEDGER_TEST}
    head = {**base, "tests/fixtures/builders.py": NEW_LOGIC, "tests/helpers.py": NEW_LOGIC}
    assert review("test_impact", build_context(base, head)).findings == []


def test_removed_symbol_is_claimed_only_when_gone_from_the_head_tree(build_context: Any) -> None:
    base = {
        "llm/base.py": "class Backend:\n    pass\n",
        "llm/http.py": "from llm.base import Backend\n\n\nclass Http(Backend):\n    def model_id(self):\n        return 'x'\n\n    def close(self):\n        return None\n",
        "tests/test_http.py": "from llm.http import Http\n\n\ndef test_id():\n    assert Http().model_id() == 'x'\n",
    }
    moved_up = {
        **base,
        "llm/base.py": "class Backend:\n    def model_id(self):\n        return 'x'\n",
        "llm/http.py": "from llm.base import Backend\n\n\nclass Http(Backend):\n    def close(self):\n        return None\n",
    }
    assert review("test_impact", build_context(base, moved_up)).findings == []  # inherited from the base class
    gone = {**base, "llm/http.py": moved_up["llm/http.py"]}
    result = review("test_impact", build_context(base, gone))
    assert [(r, f.severity, f.confidence) for (_, _, r), f in zip(rules_of(result), result.findings, strict=True)] == [
        ("tests:removed-symbol", "high", "high")
    ]


def test_signature_findings_only_for_changes_that_break_callers(build_context: Any) -> None:
    base = {
        "shop/cart.py": "def total(items, tax):\n    return sum(items) * (1 + tax)\n",
        "tests/test_cart.py": "from shop.cart import total\n\n\ndef test_total():\n    assert total([1], 0) == 1\n",
    }
    annotated = {
        **base,
        "shop/cart.py": "def total(items: list[int], tax: float = 0.0) -> float:\n    return sum(items) * (1 + tax)\n",
    }
    assert review("test_impact", build_context(base, annotated)).findings == []  # old calls still work
    required = {**base, "shop/cart.py": "def total(items, tax, currency):\n    return sum(items) * (1 + tax)\n"}
    result = review("test_impact", build_context(base, required))
    assert [r for _, _, r in rules_of(result)] == ["tests:stale-signature"]
    assert "new required parameter currency" in result.findings[0].title


def test_deleted_and_weakened_tests(build_context: Any) -> None:
    code = "def rate(x):\n    return x * 2\n\n\ndef legacy(x):\n    return x\n"
    tests = (
        "from pay.rates import legacy, rate\n\n\ndef test_rate():\n    assert rate(1) == 2\n    assert rate(0) == 0\n\n\n"
        "def test_rate_negative():\n    assert rate(-1) == -2\n"
    )
    base = {"pay/rates.py": code, "tests/test_rates.py": tests}
    deleted = {**base, "tests/test_rates.py": tests.split("\n\n\ndef test_rate_negative")[0] + "\n"}
    assert [r for _, _, r in rules_of(review("test_impact", build_context(base, deleted)))] == ["tests:test-deleted"]
    subject_gone = {
        "pay/rates.py": "def legacy(x):\n    return x\n",
        "tests/test_rates.py": "from pay.rates import legacy\n",
    }
    assert review("test_impact", build_context(base, subject_gone)).findings == []  # the code went with its tests
    weakened = {**base, "tests/test_rates.py": tests.replace("    assert rate(0) == 0\n", "")}
    assert [r for _, _, r in rules_of(review("test_impact", build_context(base, weakened)))] == ["tests:test-weakened"]


# --- security: taint from a source to a sink ---------------------------------------------------------

FLASK = "from flask import Flask, request, redirect, render_template_string\nimport requests\nfrom pathlib import Path\nimport xml.etree.ElementTree as ET\nfrom lxml import etree\n\napp = Flask(__name__)\nBASE = Path('/srv/files')\nDATA = Path(__file__).parent / 'data'\n\n\n"


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ("def f():\n    name = request.args['n']\n    return (BASE / name).read_bytes()\n", "python:path-traversal"),
        ("def f():\n    return redirect(request.args.get('next'))\n", "python:open-redirect"),
        (
            "def f():\n    target = request.json['url']\n    return requests.get(target, timeout=5).text\n",
            "python:ssrf",
        ),
        ("def f():\n    return render_template_string(request.form['tpl'])\n", "python:template-injection"),
        (
            "def f():\n    parser = etree.XMLParser(resolve_entities=True)\n"
            "    return etree.fromstring(request.data, parser).tag\n",
            "python:xml-external",
        ),
        # `<path:...>` takes "/"; a plain `<name>` as the last component cannot leave BASE (see the history fixtures)
        (
            "@app.get('/files/<path:name>')\ndef f(name):\n    return open(BASE / name).read()\n",
            "python:path-traversal",
        ),
    ],
)
def test_outside_data_reaching_a_sink_fires(build_context: Any, body: str, rule: str) -> None:
    result = review("security", build_context({}, {"web/views.py": FLASK + body}))
    assert [r for _, _, r in rules_of(result)] == [rule]


@pytest.mark.parametrize(
    "body",
    [
        "def f():\n    return redirect('/home')\n",
        "def f():\n    return requests.get('https://api.example.org/status', timeout=5).text\n",
        "def f():\n    return render_template_string('Hello {{ name }}', name=request.args['n'])\n",
        "def f():\n    return ET.fromstring('<a/>').tag\n",
        "def f():\n    return ET.fromstring(request.data).tag\n",  # the stdlib parser resolves no external entity
        "def f():\n    return etree.fromstring(request.data).tag\n",  # nor does lxml >= 5 by default
        "def load_fixture(name: str) -> str:\n    return (DATA / name).read_text()\n",  # package-relative folder
        "def f():\n    name = request.args['n']\n    path = (BASE / name).resolve()\n"
        "    if not path.is_relative_to(BASE):\n        raise ValueError(name)\n    return path.read_bytes()\n",
        "TABLE = 'orders'\n\n\ndef count(conn):\n    return conn.execute(f'SELECT count(*) FROM {TABLE}').fetchone()\n",
    ],
)
def test_sinks_fed_by_constants_or_checked_values_stay_quiet(build_context: Any, body: str) -> None:
    assert review("security", build_context({}, {"web/views.py": FLASK + body})).findings == []


def test_a_sink_reached_only_by_a_value_of_unknown_origin_is_low_confidence(build_context: Any) -> None:
    body = "def run(cmd: str) -> int:\n    import os\n    return os.system('nice ' + cmd)\n"
    [finding] = review("security", build_context({}, {"web/store.py": FLASK + body})).findings
    assert (finding.rule, finding.confidence, finding.cwe) == ("python:shell-interpolation", "low", "CWE-78")


AUTH = "import hashlib\nimport hmac\nimport ssl\nimport requests\n\n\n"


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        ("def ok(sig, body, key):\n    expected_sig = hmac.new(key, body, 'sha256').hexdigest()\n    return sig == expected_sig\n",
         "python:timing-unsafe-compare"),
        ("def store(user, password):\n    user.hash = hashlib.sha256(password.encode()).hexdigest()\n",
         "python:weak-password-hash"),
        ("def fetch(url):\n    return requests.get(url, verify=False)\n", "python:tls-verify-disabled"),
        ("def context():\n    ctx = ssl.create_default_context()\n    ctx.check_hostname = False\n    return ctx\n",
         "python:tls-verify-disabled"),
    ],
)  # fmt: skip
def test_authentication_defects(build_context: Any, body: str, rule: str) -> None:
    assert rule in [r for _, _, r in rules_of(review("security", build_context({}, {"svc/auth.py": AUTH + body})))]


@pytest.mark.parametrize(
    "body",
    [
        "def ok(sig, expected_sig):\n    return hmac.compare_digest(sig, expected_sig)\n",
        "def kind(token_type):\n    return token_type == 'bearer'\n",
        "def etag(data):\n    return hashlib.sha256(data).hexdigest()\n",
        "def context(verify):\n    ctx = ssl.create_default_context()\n    if not verify:\n"
        "        ctx.check_hostname = False\n    return ctx\n",  # the caller's opt-out, implemented
    ],
)
def test_authentication_near_misses(build_context: Any, body: str) -> None:
    assert review("security", build_context({}, {"svc/auth.py": AUTH + body})).findings == []


# --- configuration -----------------------------------------------------------------------------------


def test_settings_are_read_only_in_configuration_and_by_whole_key(build_context: Any) -> None:
    base = {
        "site/settings.py": "SESSION_COOKIE_AGE = 3600\nAUTHOR = 'ops'\nLANGUAGE = 'en'\nTIME_ZONE = 'UTC'\nDEBUG = False\n",
        "deploy/app.yaml": "timeout: 30\nverify_ssl: true\n",
        "svc/llm.py": "def ask(client):\n    max_tokens = 256\n    return client.ask(max_tokens=max_tokens)\n",
    }
    head = {
        "site/settings.py": (
            "SESSION_COOKIE_AGE = 3600 * 24 * 90\nAUTHOR = 'platform'\nLANGUAGE = 'en'\nTIME_ZONE = 'UTC'\nDEBUG = True\n"
        ),
        "deploy/app.yaml": "timeout: 60\nverify_ssl: false\n",
        "svc/llm.py": "def ask(client):\n    max_tokens = 1024\n    return client.ask(max_tokens=max_tokens)\n",
    }
    found = rules_of(review("security", build_context(base, head)))
    assert found == [
        ("deploy/app.yaml", 2, "config:security-setting"),  # verification off; a plain timeout is not security
        ("site/settings.py", 1, "config:security-setting"),  # a session lives 90 days instead of an hour
        ("site/settings.py", 5, "config:security-setting"),  # debug on; AUTHOR is not "auth"
    ]


# --- architecture -----------------------------------------------------------------------------------


def test_layer_rule_resolves_imports_and_never_guesses(build_context: Any) -> None:
    base = {"shop/core/prices.py": "X = 1\n", "shop/web/views.py": "def show():\n    return 1\n"}
    head = {
        **base,
        "shop/core/prices.py": "from http import HTTPStatus\nimport api\nfrom shop.web.views import show\n\nX = 1\n",
    }
    assert rules_of(review("architecture", build_context(base, head))) == [
        ("shop/core/prices.py", 3, "layers:inward-dependency")  # stdlib `http` and unknown `api` are not layers
    ]


# --- bandit -----------------------------------------------------------------------------------------


def test_bandit_import_only_checks_do_not_post(build_context: Any) -> None:
    text = "import telnetlib\nimport xml.etree.ElementTree\nimport ftplib\nimport pickle\n\n\ndef load(b):\n    return pickle.loads(b)\n"
    found = [r for _, _, r in rules_of(review("security", build_context({}, {"net/legacy.py": text})))]
    assert found == ["python:unsafe-deserialization"]  # the call, not the imports (B401/B402/B405)
