"""bandit as one of the security analyzers, run on a temporary copy of a changed Python file.

bandit parses the file and walks its syntax tree; it never imports or runs it. It parses with the
reader every analyzer uses (`bandit_runner`), so a file in 3.12+ syntax is not lost to it. The copy keeps the
reviewed code away from the repository checkout (and from any bandit configuration in it). Checks
that only say "this module was imported" or "an assert exists" are skipped: they are noise in a
review. Only issues on lines the change added are kept.

Severity policy: bandit's own severity, one step down when bandit's confidence is low; the
finding's confidence is bandit's confidence. Checks our syntax-tree rules judge with data flow
(SQL text, urlopen, XML parsers) are skipped here, as are the import-only checks. B104 (binding to
all interfaces) is not reported where the wildcard address is only compared with (`host not in
{"0.0.0.0", "[::]"}`). bandit honours its own `# nosec`; a project that runs ruff's flake8-bandit
rules writes the same decision as `# noqa: S202` (ruff's S### is bandit's B### for the same check), and
that is honoured too, for that check only.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from reviewers.analyzers.bandit_runner import CONVERSIONS_ENV
from reviewers.analyzers.batch_answers import BatchAnswers
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.pysyntax import conversion_of
from reviewers.kernel.contracts import Confidence, Severity
from reviewers.kernel.errors import AnalyzerError

# bandit with our parser in place of `ast.parse`, so it reads 3.12+ syntax as every analyzer does
# (`bandit_runner`); -I keeps the reviewed code's directory and PYTHONPATH out of its imports.
BANDIT_COMMAND = (sys.executable, "-I", str(Path(__file__).with_name("bandit_runner.py")))
BANDIT_TIMEOUT_S = 60  # bandit's start-up dominates (~0.5 s); a minute means it hung
BATCH_TIMEOUT_S = BANDIT_TIMEOUT_S * 4  # one process over many files
# bandit processes one prefetch runs at once: at most one per core but one, which the reviewing
# process keeps for its own analysis while bandit runs beside it (on two cores, a second bandit
# only shared the core left over, and paid its half-second start-up again)
MAX_BANDIT_PROCESSES = 4
MIN_FILES_PER_PROCESS = 4  # fewer files than this do not pay for another process's start-up
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


# a file text's digest → bandit's JSON report for it alone (the digest: every changed file passes
# through here, and the texts themselves would be kept in memory as keys)
_prefetched: BatchAnswers[str, str] = BatchAnswers()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()


def prefetch(texts: Sequence[str], *, background: bool = False) -> None:
    """Run bandit over many files in a few processes and keep each file's report.

    bandit's start-up (about half a second) dominates its cost on a file, so a reviewer that reads
    every changed file asks for all of them at once, split over up to `MAX_BANDIT_PROCESSES`
    processes (bandit is single-threaded; the analyzers read every changed file, so this is their
    largest cost). A file bandit could not parse, or a batch that failed, is left to its own run,
    as without a prefetch. In the `background`, the reviewer goes on with its own analysis while
    bandit runs, and `bandit_issues` waits for a file's report.
    """
    by_digest = {_digest(text): text for text in texts}
    wanted = _prefetched.missing(by_digest)
    if len(wanted) < 2:
        return

    def reports(digests: Sequence[str]) -> dict[str, str]:
        chosen = [by_digest[d] for d in digests]
        spare_cores = (os.cpu_count() or 1) - 1
        processes = max(1, min(MAX_BANDIT_PROCESSES, spare_cores, len(chosen) // MIN_FILES_PER_PROCESS))
        out: dict[str, str] = {}
        with ThreadPoolExecutor(max_workers=processes) as pool:
            for answers in pool.map(_bandit_batch, [chosen[i::processes] for i in range(processes)]):
                out.update(answers)
        return out

    _prefetched.run_batch(wanted, reports, background=background)


def _bandit_batch(texts: Sequence[str]) -> dict[str, str]:
    """bandit in one process over `texts`: each text's report, for the texts it could parse."""
    with tempfile.TemporaryDirectory(prefix="reviewloop-bandit-") as tmp:
        names = [f"f{i}.py" for i in range(len(texts))]
        for name, text in zip(names, texts, strict=True):
            (Path(tmp) / name).write_text(text, encoding="utf-8", errors="surrogateescape")
        command = [*BANDIT_COMMAND, "-f", "json", "-q", "-s", ",".join(BANDIT_SKIP), *names]
        try:
            done = subprocess.run(
                command,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=BATCH_TIMEOUT_S,
                check=False,
                env=_with_conversions(texts, Path(tmp)),
            )
            report = json.loads(done.stdout)
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            return {}
    if not isinstance(report, dict):
        return {}
    # a file bandit could not parse is left to its own run, which reports it; the others keep theirs
    failed = {Path(str(e.get("filename", ""))).name for e in report.get("errors") or [] if isinstance(e, dict)}
    by_name: dict[str, list[Any]] = {name: [] for name in names}
    for result in report.get("results", []):
        name = Path(str(result.get("filename", ""))).name
        if name in by_name:
            by_name[name].append(result)
    return {
        _digest(text): json.dumps({"results": by_name[name], "errors": []})
        for name, text in zip(names, texts, strict=True)
        if name not in failed
    }


def _with_conversions(texts: Sequence[str], tmp: Path) -> dict[str, str]:
    """bandit's environment, naming a file of the reader's conversions of the texts in newer syntax
    (their sha256 → `Downlevelled`): bandit reads them as every analyzer does, and libcst runs only
    in the reader's isolated process, never in bandit's. A text no version reads gets none, and
    bandit reports it as a syntax error, as it always did."""
    conversions = {
        hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest(): converted
        for text in texts
        if (converted := conversion_of(text)) is not None
    }
    env = dict(os.environ)
    if conversions:
        table = tmp / "conversions.json"
        table.write_text(json.dumps(conversions), encoding="utf-8")
        env[CONVERSIONS_ENV] = str(table)
    return env


def _bandit_stdout(text: str, path: str) -> str:
    ready = _prefetched.get(_digest(text), wait_s=BATCH_TIMEOUT_S)
    return ready if ready is not None else _bandit_single(text, path)


# The replay environment runs the same snapshot many times (M executions per strategy); bandit's
# answer depends only on the text, so it is computed once. Failures raise and are not cached.
@functools.lru_cache(maxsize=ANALYZER_CACHE_SIZE)
def _bandit_single(text: str, path: str) -> str:
    with tempfile.TemporaryDirectory(prefix="reviewloop-bandit-") as tmp:
        # A fixed name: the reviewed path could start with "-" or hold characters bandit misreads.
        copy = Path(tmp) / "reviewed.py"
        copy.write_text(text, encoding="utf-8")
        command = [*BANDIT_COMMAND, "-f", "json", "-q", "-s", ",".join(BANDIT_SKIP), copy.name]
        try:
            done = subprocess.run(
                command,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=BANDIT_TIMEOUT_S,
                check=False,
                env=_with_conversions([text], Path(tmp)),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AnalyzerError(f"bandit could not run on {path}: {exc}") from exc
    # bandit exits 1 when it found something; anything else with no JSON is its own failure.
    try:
        json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise AnalyzerError(f"bandit failed on {path}: {done.stderr.strip()[:300] or exc}") from exc
    return done.stdout


def _cwe(field: object) -> str | None:
    """bandit's `issue_cwe` ({"id": 78, "link": ...}) as "CWE-78"; None when it names none."""
    cwe_id = field.get("id") if isinstance(field, dict) else None
    return f"CWE-{cwe_id}" if isinstance(cwe_id, int) and cwe_id > 0 else None


_WILDCARD_ADDRESSES = frozenset({"0.0.0.0", "::", "[::]"})  # noqa: S104 - what B104 looks for, not a bind


def wildcard_only_compared(tree: ast.Module | None, line: int) -> bool:
    """Whether every wildcard address written on `line` is an operand of a comparison (B104 reads
    the string wherever it is)."""
    if tree is None:
        return False
    written: set[int] = set()
    compared: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in _WILDCARD_ADDRESSES and node.lineno == line:
            written.add(id(node))
        elif isinstance(node, ast.Compare):
            compared.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Constant))
    return bool(written) and written <= compared


# ruff's suppression comment with its codes (noqa, a colon, codes split by commas or spaces; any case)
_NOQA_CODES = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)", re.IGNORECASE)


def suppressed_as_ruff_code(file: ChangedFile, test_id: str, span: Sequence[int]) -> bool:
    """Whether a line of the finding's statement carries the project's own ruff suppression of the
    same check (noqa S202 for bandit's B202): the maintainers decided it, with the other tool.
    A bare noqa names no check and is not taken as a decision about this one."""
    if not (test_id.startswith("B") and test_id[1:].isdigit()):
        return False
    ruff_code = "S" + test_id[1:]
    for number in range(min(span), max(span) + 1):
        for match in _NOQA_CODES.finditer(file.line_text(number)):
            if ruff_code in re.split(r"[\s,]+", match.group("codes").upper()):
                return True
    return False


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
        if test_id == "B104" and wildcard_only_compared(file.python_tree, line):
            continue  # `host not in {"0.0.0.0", "[::]"}` asks about an address, it binds nothing
        if suppressed_as_ruff_code(file, test_id, span):
            continue  # the project's ruff suppression of S202 is one of B202: their decision
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
                cwe=_cwe(result.get("issue_cwe")),
            )
        )
    return issues
