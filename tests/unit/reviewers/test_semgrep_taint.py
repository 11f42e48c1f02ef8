"""JavaScript/TypeScript, Go and Java security on semgrep's engine with our own taint rules.

The labeled suite (tests/fixtures/security/<language>/) runs through the real engine: every
vulnerable case is found with its CWE and no near-miss is reported. Then the same files go through
the security reviewer as product code, and the engine's failures are named, never silent.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from bench.security_languages import SUITE, SUITE_LANGUAGES, cases_in, score_suite, suite_files
from reviewers import run_reviewer
from reviewers.analyzers import semgrep_taint
from reviewers.kernel.contracts import PlanItem, ReviewerResult

MIN_CASES = 10  # per language: vulnerable cases, and safe near-misses


@pytest.fixture(autouse=True)
def _fresh_answers() -> None:
    # Not a skip: a CI without the engine must fail here, not pass quietly (`make setup` installs it).
    assert semgrep_taint.engine_binary() is not None, "semgrep's engine is not installed: run make setup"
    semgrep_taint._answers.clear()


def test_the_suite_has_enough_cases_per_language() -> None:
    for language in SUITE_LANGUAGES:
        cases = [c for p in suite_files((language,)) for c in cases_in(p, p.read_text(encoding="utf-8"))]
        assert sum(c.vulnerable for c in cases) >= MIN_CASES, language
        assert sum(not c.vulnerable for c in cases) >= MIN_CASES, language
        # each class has a near-miss, so its false-positive rate is measured, not assumed
        assert {c.cwe for c in cases if c.vulnerable} <= {c.cwe for c in cases if not c.vulnerable}, language


def test_every_vulnerable_case_is_found_and_no_safe_case_is_flagged() -> None:
    result = score_suite()
    assert not result.not_analysed
    assert [f"{c.path}:{c.line} {c.cwe}" for c in result.missed] == []
    assert result.false_alarms == []
    for language in SUITE_LANGUAGES:
        for cwe, score in result.scores[language].items():
            assert score.tpr - score.fpr == 1.0, (language, cwe)


def _product_copy(paths: list[Path]) -> dict[str, str]:
    """The suite's files as product code of a repository (the suite itself lives under tests/)."""
    return {f"src/{p.relative_to(SUITE)}": p.read_text(encoding="utf-8") for p in paths}


def test_through_the_security_reviewer_each_case_gets_its_cwe_and_near_misses_stay_quiet(
    build_context: Any,
) -> None:
    files = suite_files()
    head = _product_copy(files)
    context = build_context({}, head)
    result = run_reviewer("security", context, PlanItem(reviewer="security", step_budget=30), None)
    assert not result.not_reviewed, result.not_reviewed
    # The secret scanner runs on every file and is judged by its own tests; its named-literal rule
    # takes a header name ("X-Api-Key-V2") for a credential, which is not this engine's doing.
    by_line = {(f.path, f.line): f for f in result.findings if not f.rule.startswith("secrets:")}
    for path in files:
        product_path = f"src/{path.relative_to(SUITE)}"
        for case in cases_in(path, head[product_path]):
            finding = by_line.get((product_path, case.line))
            if case.vulnerable:
                # the reviewer keeps the strongest few per file; those it keeps carry their CWE
                if finding is not None:
                    assert finding.cwe == case.cwe, (product_path, case.line)
            else:
                assert finding is None, (product_path, case.line, finding and finding.rule)
    assert {f.cwe for f in result.findings} >= {"CWE-78", "CWE-89", "CWE-22", "CWE-601", "CWE-79"}
    assert all(f.cwe for f in result.findings if f.rule.split(":")[0] in ("javascript", "go", "java"))


def test_a_javascript_shell_command_from_the_request_is_cwe_78_and_missed_without_data_flow(
    build_context: Any,
) -> None:
    js = 'const { exec } = require("child_process");\napp.get("/x", (req, res) => {\n  exec("rm -rf " + req.query.dir);\n});\n'
    context = build_context({}, {"server/app.js": js})
    findings = run_reviewer("security", context, PlanItem(reviewer="security"), None).findings
    assert [(f.line, f.cwe, f.rule, f.confidence) for f in findings] == [
        (3, "CWE-78", "javascript:command-injection", "high")
    ]
    constant = js.replace('"rm -rf " + req.query.dir', '"rm -rf /tmp/cache"')
    quiet = run_reviewer(
        "security", build_context({}, {"server/app.js": constant}), PlanItem(reviewer="security"), None
    )
    assert quiet.findings == []


def test_only_lines_the_change_wrote_are_reported(build_context: Any) -> None:
    old = 'const { exec } = require("child_process");\nfunction f(req) {\n  exec("ls " + req.query.d);\n}\n'
    new = old + "function g(req) {\n  return 1;\n}\n"
    context = build_context({"a.js": old}, {"a.js": new})
    assert run_reviewer("security", context, PlanItem(reviewer="security"), None).findings == []


def _not_reviewed(result: ReviewerResult) -> dict[str, str]:
    """path → "reason: detail" for every file the reviewer names as not analysed in full."""
    return {n.path: n.describe() for n in result.not_reviewed}


def _fake_engine(tmp_path: Path, script: str) -> str:
    binary = tmp_path / "semgrep-core"
    binary.write_text("#!/bin/sh\n" + script + "\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return str(binary)


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("sleep 30", "timed out"),
        ("echo boom >&2; exit 2", "failed: boom"),
        ("echo '{not json'", "failed"),
    ],
)
def test_an_engine_that_fails_or_hangs_names_every_file_not_reviewed(
    build_context: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, reason: str
) -> None:
    monkeypatch.setattr(semgrep_taint, "engine_binary", lambda: _fake_engine(tmp_path, script))
    monkeypatch.setattr(semgrep_taint, "ENGINE_TIMEOUT_S", 1.0)
    head = {"web/a.js": "exec(req.query.x);\n", "svc/b.go": "package b\n", "app/C.java": "class C {}\n"}
    result = run_reviewer("security", build_context({}, head), PlanItem(reviewer="security"), None)
    named = _not_reviewed(result)
    assert set(named) == set(head)
    assert all(reason in why and "semgrep" in why for why in named.values())
    assert "web/a.js" in (result.error or "")


def test_a_rule_the_engine_refuses_fails_the_run_loudly(build_context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rules_json, by_id = semgrep_taint.load_rules()
    broken = rules_json.replace('"eval($CODE)"', '"eval($CODE((("', 1)
    assert broken != rules_json
    monkeypatch.setattr(semgrep_taint, "load_rules", lambda: (broken, by_id))
    result = run_reviewer(
        "security", build_context({}, {"a.js": "eval(req.query.x);\n"}), PlanItem(reviewer="security"), None
    )
    assert (
        "analyzer-error: security engine (semgrep): rule javascript.code-eval refused" in _not_reviewed(result)["a.js"]
    )


def test_a_missing_engine_is_named(build_context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(semgrep_taint, "engine_binary", lambda: None)
    result = run_reviewer("security", build_context({}, {"a.ts": "let x = 1;\n"}), PlanItem(reviewer="security"), None)
    assert (
        _not_reviewed(result)["a.ts"].startswith("unavailable: ") and "not installed" in _not_reviewed(result)["a.ts"]
    )


def test_a_file_that_does_not_parse_is_named_and_what_parsed_is_kept(build_context: Any) -> None:
    broken = 'const { exec } = require("child_process");\nfunction f(req) {\n  exec("ls " + req.query.d);\n}\n)))) {{\n'
    result = run_reviewer("security", build_context({}, {"bad.js": broken}), PlanItem(reviewer="security"), None)
    why = _not_reviewed(result)["bad.js"]
    assert why.startswith("parse-error: ") and "line 5" in why and "analysed in part" in why
    assert [(f.line, f.cwe) for f in result.findings] == [(3, "CWE-78")]


def test_one_engine_process_per_review(build_context: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = semgrep_taint.engine_binary()
    assert real is not None
    log = tmp_path / "calls"
    wrapper = _fake_engine(tmp_path, f'echo run >> {log}\nexec {real} "$@"')
    monkeypatch.setattr(semgrep_taint, "engine_binary", lambda: wrapper)
    head = {f"src/m{i}.{ext}": f"// file {i}\nconst a{i} = 1;\n" for i, ext in enumerate(["js", "ts", "js", "ts"])}
    head["cmd/main.go"] = "package main\n\nfunc main() {}\n"
    head["src/Main.java"] = "class Main {}\n"
    result = run_reviewer("security", build_context({}, head), PlanItem(reviewer="security"), None)
    assert not result.not_reviewed
    assert log.read_text().count("run") == 1
    assert os.access(wrapper, os.X_OK)


def test_every_install_pins_the_engine_version_the_module_speaks() -> None:
    repo = Path(__file__).resolve().parents[3]
    pin = f"semgrep=={semgrep_taint.SEMGREP_VERSION}"
    for name in ("Makefile", "deploy/Dockerfile", "deploy/Dockerfile.gpu"):
        text = (repo / name).read_text(encoding="utf-8")
        assert pin in text and "--no-deps" in text, name
        assert text.count("semgrep==") == 1, name


def test_a_background_batch_is_waited_for_not_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    files = [("web/a.js", "exec('ls ' + req.query.dir);\n"), ("web/b.go", "package web\n")]
    release = threading.Event()
    scanned: list[list[str]] = []

    def scan(batch: list[tuple[str, str]], *, timeout_s: float) -> list[semgrep_taint.EngineAnswer]:
        scanned.append([path for path, _ in batch])
        release.wait(10)
        return [semgrep_taint.EngineAnswer((semgrep_taint.EngineMatch("r", 1, 1),)) for _ in batch]

    monkeypatch.setattr(semgrep_taint, "scan", scan)
    semgrep_taint.prefetch(files, background=True)  # returns while the engine runs
    threading.Timer(0.2, release.set).start()
    answer = semgrep_taint.engine_answer(*files[0])
    assert answer.matches == (semgrep_taint.EngineMatch("r", 1, 1),)
    assert scanned == [["web/a.js", "web/b.go"]]  # one engine run, not one more for the file asked about
