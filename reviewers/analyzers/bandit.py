"""bandit as one of the security analyzers, run on a temporary copy of a changed Python file.

bandit parses the file and walks its syntax tree; it never imports or runs it. The copy keeps the
reviewed code away from the repository checkout (and from any bandit configuration in it). Checks
that only say "this module was imported" or "an assert exists" are skipped: they are noise in a
review. Only issues on lines the change added are kept.

Severity policy: bandit's own severity, one step down when bandit's confidence is low; the
finding's confidence is bandit's confidence. Checks our syntax-tree rules judge with data flow
(SQL text, urlopen, XML parsers) are skipped here, as are the import-only checks.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reviewers.analyzers.batch_answers import BatchAnswers
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.kernel.contracts import Confidence, Severity
from reviewers.kernel.errors import AnalyzerError

BANDIT_TIMEOUT_S = 60  # bandit's start-up dominates (~0.5 s); a minute means it hung
ANALYZER_CACHE_SIZE = 256  # distinct file texts kept; a replay batch touches far fewer
BANDIT_SKIP = (
    "B101",  # assert used: asserts are how tests and invariants are written
    "B105",
    "B106",
    "B107",  # hard-coded passwords: the secrets scanner judges values, not just names
    "B110",  # try/except/pass: a code-quality matter, reported by that reviewer (ruff S110)
    "B112",  # try/except/continue: same (ruff S112)
    "B311",  # random for non-crypto use: almost always simulation or jitter
    # import-only checks ("import telnetlib", "import xml.etree"): the import is not the defect; the
    # call is, and B3xx / our own tree checks report the calls that are
    "B401",
    "B402",
    "B403",
    "B404",
    "B405",
    "B406",
    "B407",
    "B408",
    "B409",
    "B410",
    "B411",
    "B412",
    "B413",
    "B606",  # a process started without a shell: the safe form, and bandit says so only as information
    "B615",  # hub download without a pinned revision: most calls load a local path, which bandit cannot tell
    # calls our syntax-tree checks judge by where the value comes from, not by the call alone: SQL
    # text (python:sql-interpolation), urlopen (python:ssrf), XML parsers (python:xml-external)
    "B608",
    "B310",
    "B313",
    "B314",
    "B315",
    "B316",
    "B317",
    "B318",
    "B319",
    "B320",
    "B603",  # subprocess without shell: the safe form
    "B607",  # partial executable path: environment hygiene, not a defect in the change
)
# bandit test id → the family our own pattern checks use, so both reports of one problem merge.
KIND_BY_TEST: dict[str, str] = {
    "B501": "tls-verify", "B502": "tls-verify", "B503": "tls-verify", "B504": "tls-verify",
    "B323": "tls-verify",
    "B601": "shell", "B602": "shell", "B604": "shell", "B605": "shell", "B609": "shell",
    "B608": "sql",
    "B301": "deserialization", "B302": "deserialization", "B506": "deserialization",
    "B614": "deserialization",
    "B102": "code-exec", "B307": "code-exec",
}  # fmt: skip
_SEVERITY: dict[str, Severity] = {"HIGH": "high", "MEDIUM": "medium", "LOW": "low"}
_CONFIDENCE: dict[str, Confidence] = {"HIGH": "high", "MEDIUM": "medium", "LOW": "low"}
_ONE_DOWN: dict[Severity, Severity] = {
    "critical": "high",
    "high": "medium",
    "medium": "low",
    "low": "low",
    "info": "info",
}


def run_bandit_json(text: str, *, path: str) -> dict[str, Any]:
    """bandit's JSON report for one file's text. Raises AnalyzerError when bandit cannot run."""
    report = json.loads(_bandit_stdout(text, path))
    if not isinstance(report, dict):
        raise AnalyzerError(f"bandit gave unexpected output on {path}")
    return report


_prefetched: BatchAnswers[str] = BatchAnswers()  # file text → bandit's JSON report for it alone


def prefetch(texts: Sequence[str]) -> None:
    """Run bandit once over many files and keep each file's report.

    bandit's start-up (about half a second) dominates its cost on a file, so a reviewer that will
    read twenty files asks for all of them in one process. A failed batch is ignored: each file is
    then analysed on its own, as without a prefetch.
    """
    wanted = _prefetched.missing(texts)
    if len(wanted) < 2:
        return
    with tempfile.TemporaryDirectory(prefix="reviewloop-bandit-") as tmp:
        names = [f"f{i}.py" for i in range(len(wanted))]
        for name, text in zip(names, wanted, strict=True):
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "bandit", "-f", "json", "-q", "-s", ",".join(BANDIT_SKIP), *names]
        try:
            done = subprocess.run(
                command, cwd=tmp, capture_output=True, text=True, timeout=BANDIT_TIMEOUT_S * 4, check=False
            )
            report = json.loads(done.stdout)
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            return
    if not isinstance(report, dict) or report.get("errors"):
        return  # a file bandit could not parse: leave every file to its own run, which reports it
    by_name: dict[str, list[Any]] = {name: [] for name in names}
    for result in report.get("results", []):
        name = Path(str(result.get("filename", ""))).name
        if name in by_name:
            by_name[name].append(result)
    _prefetched.store(
        {text: json.dumps({"results": by_name[name], "errors": []}) for name, text in zip(names, wanted, strict=True)}
    )


def _bandit_stdout(text: str, path: str) -> str:
    ready = _prefetched.get(text)
    return ready if ready is not None else _bandit_single(text, path)


# The replay environment runs the same snapshot many times (M executions per strategy); bandit's
# answer depends only on the text, so it is computed once. Failures raise and are not cached.
@functools.lru_cache(maxsize=ANALYZER_CACHE_SIZE)
def _bandit_single(text: str, path: str) -> str:
    with tempfile.TemporaryDirectory(prefix="reviewloop-bandit-") as tmp:
        # A fixed name: the reviewed path could start with "-" or hold characters bandit misreads.
        copy = Path(tmp) / "reviewed.py"
        copy.write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "bandit", "-f", "json", "-q", "-s", ",".join(BANDIT_SKIP), copy.name]
        try:
            done = subprocess.run(
                command, cwd=tmp, capture_output=True, text=True, timeout=BANDIT_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AnalyzerError(f"bandit could not run on {path}: {exc}") from exc
    # bandit exits 1 when it found something; anything else with no JSON is its own failure.
    try:
        json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise AnalyzerError(f"bandit failed on {path}: {done.stderr.strip()[:300] or exc}") from exc
    return done.stdout


def bandit_issues(file: ChangedFile) -> list[Issue]:
    """bandit's findings on the lines this change added (any line of a multi-line statement)."""
    if file.language != "python":
        return []
    issues: list[Issue] = []
    for result in run_bandit_json(file.text, path=file.path).get("results", []):
        if not isinstance(result, dict):
            continue
        test_id = str(result.get("test_id", ""))
        line = int(result.get("line_number") or 0)
        span = [int(n) for n in result.get("line_range") or [line] if isinstance(n, int)] or [line]
        if not file.touches(min(span), max(span)):
            continue
        if not file.is_changed(line):
            line = min(n for n in file.changed_lines if min(span) <= n <= max(span))
        severity = _SEVERITY.get(str(result.get("issue_severity", "")).upper(), "low")
        if str(result.get("issue_confidence", "")).upper() == "LOW":
            severity = _ONE_DOWN[severity]
        text = str(result.get("issue_text", test_id))
        issues.append(
            Issue(
                line=line,
                rule=f"bandit:{test_id}",
                severity=severity,
                title=text[:200],
                body=f"{text} (bandit {test_id} {result.get('test_name', '')}, "
                f"confidence {str(result.get('issue_confidence', '')).lower()})",
                kind=KIND_BY_TEST.get(test_id, f"bandit:{test_id}"),
                confidence=_CONFIDENCE.get(str(result.get("issue_confidence", "")).upper(), "medium"),
            )
        )
    return issues
