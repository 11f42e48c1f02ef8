"""Each reviewer, without a model, on small merge requests: what it reports, where, and what it leaves alone."""

from __future__ import annotations

from typing import Any

from reviewers import run_reviewer
from reviewers.kernel.contracts import LayerRule, PlanItem, RepoConfig, ReviewContext, ReviewerName, ReviewerResult


def review(name: ReviewerName, context: ReviewContext, **plan: Any) -> ReviewerResult:
    return run_reviewer(name, context, PlanItem(reviewer=name, step_budget=plan.pop("step_budget", 10), **plan), None)


def where(result: ReviewerResult) -> list[tuple[str, int, str]]:
    return [(f.path, f.line, f.rule) for f in result.findings]


def check_evidence(context: ReviewContext, result: ReviewerResult) -> None:
    for f in result.findings:
        text = context.workspace.read_file(f.path)
        assert text is not None and f.category == result.reviewer == f.reviewer
        assert f.evidence == "\n".join(text.splitlines()[f.line - 1 : f.end_line])


BASE_DB = "import sqlite3\n\n\ndef connect(path):\n    return sqlite3.connect(path)\n"


def test_security_reviewer(build_context: Any) -> None:
    head_db = BASE_DB + (
        "\n\ndef by_name(conn, name):\n"
        "    sql = 'SELECT id FROM users WHERE name = \"{}\"'.format(name)\n"
        "    return conn.execute(sql).fetchall()\n"
    )
    settings_base = "SESSION_COOKIE_SECURE = True\nPAGE_SIZE = 20\n"
    settings_head = "SESSION_COOKIE_SECURE = False\nPAGE_SIZE = 50\nAWS_KEY = 'AKIAIOSFODNN7ABCDEFG'\n"
    context = build_context(
        {"app/db.py": BASE_DB, "app/settings.py": settings_base},
        {
            "app/db.py": head_db,
            "app/settings.py": settings_head,
            "tests/test_db.py": "PASSWORD = 'fixture-pw-123'\nrequests.get(u, verify=False)\n",
            "web/client.ts": "fetch(url, { agent: new https.Agent({ rejectUnauthorized: false }) });\n",
        },
    )
    result = review("security", context)
    assert where(result) == [
        ("app/db.py", 9, "python:sql-interpolation"),  # where the SQL is spliced; the parameter's origin is unknown
        ("app/settings.py", 1, "config:security-setting"),
        ("app/settings.py", 3, "secrets:known-prefix"),
        ("web/client.ts", 1, "patterns:tls-verify-disabled"),
    ]  # the test file's fake password and disabled verification are fixtures, not findings
    assert result.error is None
    check_evidence(context, result)
    assert "AKIA" not in result.findings[2].title + result.findings[2].body


def test_code_quality_reviewer(build_context: Any) -> None:
    base = "import json\n\n\ndef load(p):\n    return json.loads(open(p).read())\n"
    head = (
        "import json\nimport os\n\n\ndef load(p, cache={}):\n    try:\n        return json.loads(open(p).read())\n"
        "    except Exception:\n        return None\n"
    )
    js = "export function parse(s) {\n  try { return JSON.parse(s); } catch (e) {}\n}\n"
    context = build_context({"lib/load.py": base}, {"lib/load.py": head, "web/parse.js": js})
    result = review("code_quality", context)
    assert where(result) == [
        ("lib/load.py", 2, "ruff:F401"),
        ("lib/load.py", 5, "ruff:B006"),
        ("lib/load.py", 8, "ruff:BLE001"),
        ("web/parse.js", 2, "quality:empty-catch"),
    ]
    check_evidence(context, result)
    # From the diff alone, `json` is imported out of view on an unchanged line: no "undefined name" noise.
    bare = build_context(
        {"lib/load.py": "import json\n" + "\n" * 30 + base},
        {"lib/load.py": "import json\n" + "\n" * 30 + head},
        diff_only=True,
    )
    assert all(f.rule not in ("ruff:F821", "ruff:F401") for f in review("code_quality", bare).findings)


def test_architecture_reviewer_with_and_without_configured_layers(build_context: Any) -> None:
    files = {
        "shop/domain/cart.py": "from shop.api.routes import current_user\n\n\ndef total(items):\n    return sum(items)\n",
        "shop/api/routes.py": "from shop.domain.cart import total\n\n\ndef current_user():\n    return None\n",
    }
    base = {**files, "shop/domain/cart.py": "def total(items):\n    return sum(items)\n"}
    inferred = review("architecture", build_context(base, files))
    assert where(inferred) == [("shop/domain/cart.py", 1, "layers:inward-dependency")]
    assert "import cycle" in inferred.findings[0].title
    layers = [
        LayerRule(name="domain", paths=["shop/domain/*"]),
        LayerRule(name="api", paths=["shop/api/*"], may_import=["domain"]),
    ]
    configured = review("architecture", build_context(base, files, config=RepoConfig(layers=layers)))
    assert where(configured) == [("shop/domain/cart.py", 1, "layers:forbidden-import")]
    assert configured.findings[0].severity == "high"


def test_test_impact_reviewer(build_context: Any) -> None:
    base = {
        "billing/fees.py": "FEE_CENTS = 30\n\n\ndef fee(amount):\n    return amount + FEE_CENTS\n\n\ndef legacy():\n    return 1\n",
        "tests/test_fees.py": (
            "from billing.fees import fee, legacy\n\n\ndef test_fee():\n    assert fee(100) == 130\n\n\n"
            "def test_legacy():\n    assert legacy() == 1\n"
        ),
    }
    head = {
        **base,
        "billing/fees.py": (
            "FEE_CENTS = 45\n\n\ndef refund(amount):\n    charged = fee(amount)\n    return -charged\n\n\n"
            "def fee(amount):\n    return amount + FEE_CENTS\n"
        ),
    }
    context = build_context(base, head)
    result = review("test_impact", context)
    assert [(line, rule) for _, line, rule in where(result)] == [
        (1, "tests:stale-constant"),  # FEE_CENTS changed; test_fee (through fee) pins the old value
        (4, "tests:untested-new"),  # refund: no test names it, and fee beside it is tested
        (10, "tests:removed-symbol"),  # legacy() is gone; test_legacy still calls it
    ]
    assert "tests/test_fees.py::test_fee" in result.findings[0].body and "through fee" in result.findings[0].body
    assert "tests/test_fees.py::test_legacy" in result.findings[2].body
    check_evidence(context, result)

    # The same change with its tests updated in the merge request: only what is still untested.
    tests = "from billing.fees import fee\n\n\ndef test_fee():\n    assert fee(100) == 145\n"
    assert [
        r for _, _, r in where(review("test_impact", build_context(base, {**head, "tests/test_fees.py": tests})))
    ] == ["tests:untested-new"]


def test_test_impact_names_the_test_whose_outcome_flips(build_context: Any) -> None:
    base = {
        "cart/limits.py": "MAX_ITEMS = 10\n\n\ndef allowed(n):\n    return n <= MAX_ITEMS\n",
        "tests/test_limits.py": (
            "from cart.limits import allowed\n\n\ndef test_small():\n    assert allowed(3)\n\n\n"
            "def test_too_many():\n    assert not allowed(15)\n"
        ),
    }
    head = {**base, "cart/limits.py": base["cart/limits.py"].replace("10", "20")}
    result = review("test_impact", build_context(base, head))
    assert len(result.findings) == 1
    assert (
        result.findings[0].title
        == "MAX_ITEMS changed; tests/test_limits.py::test_too_many now tests a different outcome"
    )


def test_test_impact_in_javascript(build_context: Any) -> None:
    base = {
        "src/limits.js": "export const MAX = 5;\nexport function ok(n) { return n <= MAX; }\n",
        "tests/limits.test.js": "import { MAX, ok } from '../src/limits';\ntest('max', () => { expect(ok(5)).toBe(true); });\n",
    }
    head = {
        **base,
        "src/limits.js": base["src/limits.js"].replace("5", "6")
        + "export function clamp(n) {\n  if (n > MAX) return MAX;\n  return n;\n}\n",
    }
    result = review("test_impact", build_context(base, head))
    # MAX is redefined, not removed; clamp is new and untested.
    assert [(f.line, f.rule) for f in result.findings] == [(1, "tests:stale-constant"), (3, "tests:untested-new")]
    assert "tests/limits.test.js" in result.findings[0].body


def test_only_changed_files_are_reported(build_context: Any) -> None:
    untouched = "import os\n\ndef bad(x, acc=[]):\n    os.system(x)\n"
    context = build_context({"old.py": untouched, "new.py": "X = 1\n"}, {"old.py": untouched, "new.py": "X = 2\n"})
    for name in ("security", "code_quality", "architecture", "test_impact"):
        assert review(name, context).findings == []  # type: ignore[arg-type]
