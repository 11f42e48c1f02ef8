"""Security analysis for JavaScript/TypeScript, Go and Java: our own taint rules on semgrep's engine.

Why semgrep, and why its engine binary. Two kept engines fit: semgrep's open-source engine (PyPI
`semgrep`, LGPL-2.1), which parses a dozen languages into one syntax tree and runs taint rules
(sources, sinks, sanitizers, guards by side effect) offline from local rule files; or tree-sitter
with an analysis of our own per language. Semgrep was tried first and fits: its taint mode is the
data-flow analysis the Python side builds by hand, written once for three languages, and its rules
are short YAML a reviewer can read. The rules in `semgrep_rules/` are written for this project (no
published rule set is copied); each carries its CWE, its family (`kind`, shared with the line rules
so two reports of one problem merge) and the words of the finding.

The `semgrep` command is a Python program around the engine `semgrep-core`; on a 2-core box it
spends ~1.5 s starting (imports, rule validation, git and ignore-file handling) before the engine
reads a line, and its declared dependencies (OpenTelemetry ~=1.37, click 8.4) conflict with this
project's own. So the wheel is installed without its dependencies (`make setup`, the Dockerfiles)
and we run the engine it ships directly, with the input format its wrapper writes: one process per
review over every non-Python changed file (`prefetch`), ~0.1 s of start-up. No network, no
registry rules, no metrics: the engine binary has none of those. The interface is pinned to
`SEMGREP_VERSION`.

Bounded: the engine runs in a subprocess with a wall-clock timeout, a per-file-and-rule timeout and
a memory cap. A file the engine could not parse in full, that timed out, or a run that failed
(engine missing, crashed, timed out) is named with its reason (`incomplete`, in `not_reviewed`),
never dropped silently. Parsing is not executing: the engine reads the files.

What this does not catch: flows across files or through a helper that launders the value (the
engine follows data within a function; a call's result counts as tainted when an argument is, so a
helper that builds the command is followed, but a helper that sanitizes is not recognised unless
its name says so); request objects not named `req`/`request` in JavaScript; frameworks beyond
Express, net/http (and gorilla/mux) and the servlet API.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from reviewers.analyzers.batch_answers import BatchAnswers
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.kernel.contracts import Confidence, CoverageReason, Severity
from reviewers.paths import language_of

SEMGREP_VERSION = "1.185.0"  # the engine's input and output formats are those of this release
RULES_DIR = Path(__file__).parent / "semgrep_rules"
# language → (the engine's name for it, our rule file, the suffix the copy is written with)
LANGUAGES: dict[str, tuple[str, str, str]] = {
    "javascript": ("js", "javascript.yaml", ".js"),
    "typescript": ("ts", "javascript.yaml", ".ts"),
    "go": ("go", "go.yaml", ".go"),
    "java": ("java", "java.yaml", ".java"),
}
# One review's engine run: start-up ~0.1 s, ~0.1 s per 1,000 lines here; a minute means it hung.
ENGINE_TIMEOUT_S = 60.0
PER_FILE_RULE_TIMEOUT_S = 5  # the engine gives up one rule on one file after this (a pathological file)
ENGINE_MAX_MEMORY_MIB = 2000
MAX_FILE_BYTES = 1_000_000  # past this a file is data or generated; named, not analysed
_SEVERITY: dict[str, Severity] = {"ERROR": "high", "WARNING": "medium", "INFO": "low"}
# The line rules' families these rules judge by data flow in the languages they cover: when the engine
# read a file in full, the line rules of these families stay quiet on it.
ENGINE_KINDS = frozenset({"sql", "shell", "code-exec"})


@dataclass(frozen=True, slots=True)
class EngineRule:
    """One of our rules as a finding sees it."""

    id: str  # "javascript.command-injection"
    cwe: str
    kind: str
    severity: Severity
    confidence: Confidence
    title: str
    body: str
    taint: bool  # a taint-mode rule: it reports only where data from a source reaches the sink

    @property
    def name(self) -> str:
        """The finding's rule: "javascript:command-injection"."""
        return self.id.replace(".", ":", 1)


@dataclass(frozen=True, slots=True)
class EngineMatch:
    rule: str  # EngineRule.id
    line: int
    end_line: int


@dataclass(frozen=True, slots=True)
class EngineAnswer:
    """What the engine said about one file: its matches, and what it could not finish (or None)."""

    matches: tuple[EngineMatch, ...] = ()
    cut_short: str | None = None  # in words; None when the engine read the file in full
    reason: CoverageReason = "analyzer-error"  # what kind of gap `cut_short` is

    @property
    def incomplete(self) -> tuple[CoverageReason, str] | None:
        return None if self.cut_short is None else (self.reason, self.cut_short)


def supports(path: str) -> bool:
    return language_of(path) in LANGUAGES


@functools.lru_cache(maxsize=1)
def engine_binary() -> str | None:
    """The pinned wheel's `semgrep-core`, else one on PATH, else None (the files are then named as
    not reviewed)."""
    try:
        located = Path(str(metadata.distribution("semgrep").locate_file("semgrep/bin/semgrep-core")))
        if located.is_file() and os.access(located, os.X_OK):
            return str(located)
    except metadata.PackageNotFoundError:
        pass
    return shutil.which("semgrep-core")


@functools.lru_cache(maxsize=1)
def load_rules() -> tuple[str, dict[str, EngineRule]]:
    """(the rules as the engine reads them, JSON; our rules by id). YAML anchors (`x-` keys) are
    resolved here: the engine reads plain rules."""
    engine_rules: list[dict[str, Any]] = []
    by_id: dict[str, EngineRule] = {}
    for name in sorted(set(rule_file for _, rule_file, _ in LANGUAGES.values())):
        text = (RULES_DIR / name).read_text(encoding="utf-8")
        # libyaml's safe loader where PyYAML has it: the same documents in a fifth of the time, and
        # every cold review reads the rules
        document = yaml.load(text, Loader=yaml.CSafeLoader) if yaml.__with_libyaml__ else yaml.safe_load(text)
        # Calls that move taint into a container or builder (`list.push(x)`, `sb.append(x)`) hold for
        # every taint rule of the file.
        propagators = document.get("x-propagators", [])
        for rule in document["rules"]:
            if rule.get("mode") == "taint" and propagators:
                rule.setdefault("pattern-propagators", propagators)
            meta = rule["metadata"]
            confidence: Confidence = meta.get("confidence", "high" if rule.get("mode") == "taint" else "medium")
            by_id[rule["id"]] = EngineRule(
                id=rule["id"],
                cwe=meta["cwe"],
                kind=meta["kind"],
                severity=_SEVERITY[rule["severity"]],
                confidence=confidence,
                title=meta["title"],
                body=" ".join(meta["body"].split()),
                taint=rule.get("mode") == "taint",
            )
            engine_rules.append(rule)
    return json.dumps({"rules": engine_rules}), by_id


MAX_CACHED_ANSWERS = 2048
# (language, text) → the engine's answer; a review's batch fills it, in the background while the
# reviewer reads its other files
_answers: BatchAnswers[tuple[str, str], EngineAnswer] = BatchAnswers(MAX_CACHED_ANSWERS)


def scan(files: Sequence[tuple[str, str]], *, timeout_s: float = ENGINE_TIMEOUT_S) -> list[EngineAnswer]:
    """Run the engine once over many (path, text) pairs; one answer per pair, in order. A pair whose
    language the rules do not cover gets an empty answer. Never raises for the engine's failures:
    they come back as every affected file's `cut_short`."""
    answers: list[EngineAnswer] = [EngineAnswer() for _ in files]
    wanted: list[int] = []
    for i, (path, text) in enumerate(files):
        if language_of(path) not in LANGUAGES:
            continue
        if len(text.encode("utf-8", "replace")) > MAX_FILE_BYTES:
            answers[i] = EngineAnswer(
                cut_short=f"security engine: over {MAX_FILE_BYTES} bytes, not analysed", reason="size"
            )
            continue
        wanted.append(i)
    if not wanted:
        return answers
    binary = engine_binary()
    if binary is None:
        failed = EngineAnswer(
            cut_short=f"security engine (semgrep {SEMGREP_VERSION}) not installed", reason="unavailable"
        )
        for i in wanted:
            answers[i] = failed
        return answers
    rules_json, _ = load_rules()
    with tempfile.TemporaryDirectory(prefix="reviewloop-semgrep-") as tmp:
        root = Path(tmp)
        names: dict[str, int] = {}
        targets: list[Any] = []
        for n, i in enumerate(wanted):
            path, text = files[i]
            analyzer, _, suffix = LANGUAGES[language_of(path)]
            # A fixed name: the reviewed path could start with "-" or hold characters the engine misreads.
            name = f"f{n}{suffix}"
            (root / name).write_text(text, encoding="utf-8")
            names[name] = i
            target = {"path": {"fpath": name, "ppath": f"/{name}"}, "analyzer": analyzer, "products": ["sast"]}
            targets.append(["CodeTarget", target])
        (root / "rules.json").write_text(rules_json, encoding="utf-8")
        (root / "targets.json").write_text(json.dumps(["Targets", targets]), encoding="utf-8")
        command = [
            binary, "-json", "-rules", "rules.json", "-targets", "targets.json", "-j", "1",
            "-timeout", str(PER_FILE_RULE_TIMEOUT_S), "-timeout_threshold", "3",
            "-max_memory", str(ENGINE_MAX_MEMORY_MIB),
        ]  # fmt: skip
        report = _run_engine(command, cwd=root, timeout_s=timeout_s)
    if isinstance(report, str):
        for i in wanted:
            answers[i] = EngineAnswer(cut_short=f"security engine (semgrep) {report}")
        return answers
    broken_rules = [e for e in report.get("errors", []) if e.get("rule_id") and e.get("severity") == "error"]
    if broken_rules:  # a rule the engine refused: its run is not to be trusted for any file
        first = broken_rules[0]
        why = f"rule {first['rule_id']} refused ({str(first.get('error_type', 'error')).lower()})"
        for i in wanted:
            answers[i] = EngineAnswer(cut_short=f"security engine (semgrep): {why}")
        return answers
    matches: dict[int, list[EngineMatch]] = {i: [] for i in wanted}
    for result in report.get("results", []):
        hit = names.get(Path(str(result.get("path", ""))).name)
        if hit is not None:
            start = int(result["start"]["line"])
            matches[hit].append(EngineMatch(str(result["check_id"]), start, int(result["end"]["line"])))
    problems: dict[int, str] = {}
    for error in report.get("errors", []):
        location = error.get("location") or {}
        unread = names.get(Path(str(location.get("path") or error.get("path", ""))).name)
        if unread is None or unread in problems:
            continue
        kind = error.get("error_type", "error")
        kind = str(kind[0] if isinstance(kind, list) and kind else kind)  # ["PartialParsing", [...]]
        where = location.get("start", {}).get("line")
        at = f" at line {where}" if where else ""
        problems[unread] = f"security engine (semgrep): {_words(kind)}{at}, analysed in part"
    for i in wanted:
        answers[i] = EngineAnswer(tuple(matches[i]), problems.get(i), reason="parse-error")
    return answers


def _words(kind: str) -> str:
    """ "PartialParsing" → "partial parsing"."""
    return "".join(f" {c.lower()}" if c.isupper() else c for c in kind).strip()


def _run_engine(command: list[str], *, cwd: Path, timeout_s: float) -> dict[str, Any] | str:
    """The engine's JSON report, or why there is none."""
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=max(timeout_s, 1.0), check=False
        )
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout_s:.0f} s"
    except OSError as exc:
        return f"could not start: {exc}"
    # The engine prints progress dots before its report.
    start = done.stdout.find("{")
    try:
        report = json.loads(done.stdout[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict) or "results" not in report:
        reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"failed: {reason[:200]}"
    return report


def prefetch(files: Sequence[tuple[str, str]], *, deadline: float | None = None, background: bool = False) -> None:
    """Analyse every file of a review the engine reads in one engine process, keeping each answer
    (failures included) for `engine_issues`; in the `background`, `engine_issues` waits for it."""
    keyed = {(language_of(p), t): (p, t) for p, t in files if supports(p)}
    missing = _answers.missing(keyed)
    if not missing:
        return

    def answers(keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], EngineAnswer]:
        found = scan([keyed[k] for k in keys], timeout_s=_time_left(deadline))
        return dict(zip(keys, found, strict=True))

    _answers.run_batch(missing, answers, background=background)


def _time_left(deadline: float | None) -> float:
    if deadline is None:
        return ENGINE_TIMEOUT_S
    return max(1.0, min(ENGINE_TIMEOUT_S, deadline - time.monotonic()))


def engine_answer(path: str, text: str, *, deadline: float | None = None) -> EngineAnswer:
    key = (language_of(path), text)
    answer = _answers.get(key, wait_s=ENGINE_TIMEOUT_S)
    if answer is None:
        answer = scan([(path, text)], timeout_s=_time_left(deadline))[0]
        _answers.store({key: answer})
    return answer


def engine_issues(
    file: ChangedFile, *, deadline: float | None = None
) -> tuple[list[Issue], tuple[CoverageReason, str] | None]:
    """(the engine's findings on lines this change wrote, what it could not finish in this file and
    why, or None)."""
    if not supports(file.path):
        return [], None
    answer = engine_answer(file.path, file.text, deadline=deadline)
    _, rules = load_rules()
    issues: list[Issue] = []
    for match in answer.matches:
        rule = rules.get(match.rule)
        if rule is None or not file.touches(match.line, match.end_line):
            continue
        line = match.line
        if not file.is_changed(line):
            line = min(n for n in file.changed_lines if match.line <= n <= match.end_line)
        issues.append(
            Issue(
                line=line,
                rule=rule.name,
                severity=rule.severity,
                title=rule.title,
                body=f"{rule.body} ({rule.cwe})",
                end_line=max(line, match.end_line),
                kind=rule.kind,
                confidence=rule.confidence,
                cwe=rule.cwe,
            )
        )
    return issues, answer.incomplete
