"""The labeled security suite for JavaScript/TypeScript, Go and Java, scored on the real engine.

    python -m bench.security_languages            # the per-language table, and the engine's cost
    python -m bench.security_languages --cost-lines 10000

Cases live in tests/fixtures/security/<language>/: a line ending in a comment `expect: CWE-N` is a
vulnerable case that must be reported with that CWE; `safe: CWE-N` marks a near-miss of that class
(a guard, a constant, a sanitizer, a safe API) that must not be reported. A finding on any other
line is a false positive too (counted under the rule's CWE). All files of all languages go through
one engine run, as in a review.
"""

from __future__ import annotations

import argparse
import re
import resource
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from reviewers.paths import language_of
from reviewers.reviewer import MERGE_DISTANCE

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / "tests" / "fixtures" / "security"
SUITE_LANGUAGES = ("javascript", "typescript", "go", "java")
_MARKER = re.compile(r"(?://|/\*)\s*(expect|safe):\s*(CWE-\d+)")


@dataclass(frozen=True, slots=True)
class Case:
    path: str  # relative to SUITE
    line: int
    cwe: str
    vulnerable: bool


@dataclass
class ClassScore:
    vulnerable: int = 0
    found: int = 0
    safe: int = 0
    flagged: int = 0  # safe cases reported, and reports on unmarked lines

    @property
    def tpr(self) -> float:
        return self.found / self.vulnerable if self.vulnerable else 1.0

    @property
    def fpr(self) -> float:
        return min(1.0, self.flagged / self.safe) if self.safe else float(self.flagged > 0)


@dataclass
class SuiteResult:
    scores: dict[str, dict[str, ClassScore]] = field(default_factory=dict)  # language → CWE → score
    missed: list[Case] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)  # "path:line rule CWE"
    not_analysed: list[str] = field(default_factory=list)
    engine_s: float = 0.0
    lines: int = 0


def suite_files(languages: tuple[str, ...] = SUITE_LANGUAGES) -> list[Path]:
    return sorted(p for lang in languages for p in (SUITE / lang).rglob("*") if p.is_file() and _language(p))


def _language(path: Path) -> str | None:
    language = language_of(path.name)
    return language if language in SUITE_LANGUAGES else None


def cases_in(path: Path, text: str) -> list[Case]:
    rel = str(path.relative_to(SUITE))
    out: list[Case] = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = _MARKER.search(line)
        if m:
            out.append(Case(rel, number, m.group(2), m.group(1) == "expect"))
    return out


def score_suite(languages: tuple[str, ...] = SUITE_LANGUAGES) -> SuiteResult:
    from reviewers.analyzers import semgrep_taint  # here, so an older tree can run the reviewer score

    files = suite_files(languages)
    texts = [p.read_text(encoding="utf-8") for p in files]
    started = time.perf_counter()
    answers = semgrep_taint.scan([(p.name, t) for p, t in zip(files, texts, strict=True)])
    result = SuiteResult(engine_s=time.perf_counter() - started, lines=sum(len(t.splitlines()) for t in texts))
    _, rules = semgrep_taint.load_rules()
    for path, text, answer in zip(files, texts, answers, strict=True):
        language = path.relative_to(SUITE).parts[0]
        per_class = result.scores.setdefault(language, defaultdict(ClassScore))
        rel = str(path.relative_to(SUITE))
        if answer.cut_short:
            result.not_analysed.append(f"{rel}: {answer.cut_short}")
        reported: dict[int, set[str]] = defaultdict(set)
        for match in answer.matches:
            for line in range(match.line, match.end_line + 1):
                reported[line].add(rules[match.rule].cwe)
        cases = cases_in(path, text)
        marked = {c.line for c in cases}
        for case in cases:
            score = per_class[case.cwe]
            if case.vulnerable:
                score.vulnerable += 1
                if case.cwe in reported.get(case.line, set()):
                    score.found += 1
                else:
                    result.missed.append(case)
            else:
                score.safe += 1
                if reported.get(case.line):
                    score.flagged += 1
                    result.false_alarms.append(f"{rel}:{case.line} {sorted(reported[case.line])}")
        for match in answer.matches:
            cwe = rules[match.rule].cwe
            # A report a line or two from a case of its own class is the same finding once merged
            # (`reviewers.reviewer.merge_issues`), as in a review.
            low, high = match.line - MERGE_DISTANCE, match.end_line + MERGE_DISTANCE
            near = any(c.vulnerable and c.cwe == cwe and low <= c.line <= high for c in cases)
            if not near and not any(match.line <= n <= match.end_line for n in marked):
                per_class[cwe].flagged += 1
                result.false_alarms.append(f"{rel}:{match.line} unmarked {match.rule} {cwe}")
    return result


def render_table(result: SuiteResult) -> str:
    rows = ["| language | classes | vulnerable found | safe flagged | TPR | FPR | TPR − FPR (mean of classes) |",
            "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for language, per_class in result.scores.items():
        classes = list(per_class.values())
        vulnerable = sum(c.vulnerable for c in classes)
        found = sum(c.found for c in classes)
        safe = sum(c.safe for c in classes)
        flagged = sum(c.flagged for c in classes)
        mean = sum(c.tpr - c.fpr for c in classes) / len(classes)
        rows.append(
            f"| {language} | {len(classes)} | {found}/{vulnerable} | {flagged}/{safe} | "
            f"{found / vulnerable:.2f} | {flagged / safe:.2f} | {mean:+.2f} |"
        )
    return "\n".join(rows)


def render_classes(result: SuiteResult) -> str:
    rows = ["| language | CWE | vulnerable found | safe flagged | TPR − FPR |", "|---|---|---:|---:|---:|"]
    for language, per_class in result.scores.items():
        for cwe, c in sorted(per_class.items(), key=lambda kv: int(kv[0].split("-")[1])):
            counts = f"{c.found}/{c.vulnerable} | {c.flagged}/{c.safe}"
            rows.append(f"| {language} | {cwe} | {counts} | {c.tpr - c.fpr:+.2f} |")
    return "\n".join(rows)


def synthetic_change(lines: int, *, salt: str = "") -> list[tuple[str, str]]:
    """About `lines` lines of non-Python code made of the suite's files (renamed copies, one language
    after another), as a merge request of that size would hand the engine. A new `salt` makes texts
    no cache has seen."""
    sources = [(p, p.read_text(encoding="utf-8")) for p in suite_files()]
    out: list[tuple[str, str]] = []
    total = 0
    n = 0
    while total < lines:
        path, text = sources[n % len(sources)]
        out.append((f"src/copy{n}/{path.name}", text + f"\n// copy {n} {salt}\n"))
        total += len(text.splitlines()) + 2
        n += 1
    return out


def new_files_diff(files: list[tuple[str, str]]) -> str:
    """`git diff` text adding each file whole."""
    out: list[str] = []
    for path, text in files:
        lines = text.splitlines()
        out += [f"diff --git a/{path} b/{path}", "new file mode 100644", "--- /dev/null", f"+++ b/{path}"]
        out += [f"@@ -0,0 +1,{len(lines)} @@", *(f"+{line}" for line in lines)]
    return "\n".join(out) + "\n"


@dataclass
class Cost:
    files: int
    lines: int
    engine_s: list[float]  # one engine run over every file, each run on texts never seen
    review_s: list[float]  # `run_review` with no model (all four reviewers, the rule strategy's budget)
    engine_cpu_s: list[float] = field(default_factory=list)  # the engine process's CPU time
    review_cpu_s: list[float] = field(default_factory=list)  # this process's and its children's


def _cpu(*, own: bool = True) -> float:
    """CPU seconds of this process (`own`) or of its finished children."""
    usage = resource.getrusage(resource.RUSAGE_SELF if own else resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_cost(lines: int, repeats: int = 3) -> Cost:
    from bench.pipeline import review_once
    from reviewers.analyzers import semgrep_taint

    cost = Cost(0, 0, [], [])
    for run in range(repeats):
        files = synthetic_change(lines, salt=f"engine {run} {time.time_ns()}")
        cost.files, cost.lines = len(files), sum(len(t.splitlines()) for _, t in files)
        started, children = time.perf_counter(), _cpu(own=False)
        answers = semgrep_taint.scan(files)
        cost.engine_s.append(time.perf_counter() - started)
        cost.engine_cpu_s.append(_cpu(own=False) - children)
        failed = [a.cut_short for a in answers if a.cut_short]
        if failed:
            raise SystemExit(f"the engine did not finish: {failed[0]}")
        files = synthetic_change(lines, salt=f"review {run} {time.time_ns()}")
        cpu = _cpu() + _cpu(own=False)
        cost.review_s.append(review_once(new_files_diff(files), dict(files)))
        cost.review_cpu_s.append(_cpu() + _cpu(own=False) - cpu)
    return cost


def score_through_reviewer(languages: tuple[str, ...] = SUITE_LANGUAGES) -> dict[str, dict[str, ClassScore]]:
    """Per language, the suite's cases judged on what the whole security analyzer reports (every
    analyzer, every issue before the per-file limit) with the files presented as product code under
    src/. A vulnerable case counts as found when any issue lands on its line, whatever its CWE, so
    the figure also applies to a tree whose findings carry none (run it against an older
    `reviewers` package to compare)."""
    from agent.diff import parse_unified_diff
    from agent.workspaces.snapshot import SnapshotWorkspace
    from reviewers.analyzers.changed_file import ChangedFile
    from reviewers.kernel.contracts import ReviewContext
    from reviewers.security import SECURITY

    out: dict[str, dict[str, ClassScore]] = {}
    for language in languages:
        head = {f"src/{p.relative_to(SUITE)}": p.read_text(encoding="utf-8") for p in suite_files((language,))}
        changes = parse_unified_diff(new_files_diff(list(head.items())))
        context = ReviewContext(title="suite", description="", files=changes, workspace=SnapshotWorkspace(head))
        analyze = SECURITY.make_analyzer(context)
        per_class: dict[str, ClassScore] = defaultdict(ClassScore)
        for change in changes:
            reported = {issue.line for issue in analyze(ChangedFile(change, head[change.path])).issues}
            for case in cases_in(SUITE / change.path.removeprefix("src/"), head[change.path]):
                score = per_class[case.cwe]
                if case.vulnerable:
                    score.vulnerable += 1
                    score.found += case.line in reported
                else:
                    score.safe += 1
                    score.flagged += case.line in reported
        out[language] = dict(per_class)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost-lines", type=int, default=10_000)
    parser.add_argument("--through-reviewer", action="store_true", help="also score the whole security analyzer")
    args = parser.parse_args(argv)
    if args.through_reviewer:
        for language, per_class in score_through_reviewer().items():
            found = sum(c.found for c in per_class.values())
            vulnerable = sum(c.vulnerable for c in per_class.values())
            flagged = sum(c.flagged for c in per_class.values())
            safe = sum(c.safe for c in per_class.values())
            mean = sum(c.tpr - c.fpr for c in per_class.values()) / len(per_class)
            print(
                f"whole analyzer, {language}: found {found}/{vulnerable}, safe flagged {flagged}/{safe}, "
                f"TPR - FPR (mean of classes) {mean:+.2f}"
            )
    result = score_suite()
    print(render_table(result))
    print()
    print(render_classes(result))
    print(f"\nsuite: {result.lines} lines, one engine run {result.engine_s:.2f} s")
    for case in result.missed:
        print(f"missed: {case.path}:{case.line} {case.cwe}", file=sys.stderr)
    for alarm in result.false_alarms:
        print(f"false alarm: {alarm}", file=sys.stderr)
    for why in result.not_analysed:
        print(f"not analysed: {why}", file=sys.stderr)
    if args.cost_lines:
        cost = measure_cost(args.cost_lines)
        engine = ", ".join(f"{t:.2f}" for t in cost.engine_s)
        review = ", ".join(f"{t:.2f}" for t in cost.review_s)
        engine_cpu = ", ".join(f"{t:.2f}" for t in cost.engine_cpu_s)
        review_cpu = ", ".join(f"{t:.2f}" for t in cost.review_cpu_s)
        print(f"engine alone: {cost.files} files, {cost.lines} lines: wall {engine} s, CPU {engine_cpu} s")
        print(f"whole review, no model: wall {review} s, CPU {review_cpu} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
