"""The code-quality reviewer: defects a careful colleague would point out, not style.

Python goes through ruff (mutable defaults, bare or blind excepts, swallowed exceptions, undefined
and unused names, closures over loop variables, ...). Other languages get a few line rules for the
same kinds of defect (an empty catch block). Only lines the change added are reported. An import
ruff calls unused that another module of the repository imports from this one is a re-export, not
reported (found with one search of the repository per module with unused imports). In a project
whose packaging says Python 2 only, what Python 2 accepts is not reported (`analyzers.python2`).
Simple slips the change writes (a missing comma, logging arguments that do not match the message, an
exception built and not raised, a comparison whose result never changes, a mutable default that is
mutated) come from `analyzers.slips`, callers in the repository that a changed signature or a removed
name breaks from `analyzers.callers`; where ruff reports the same line (B006, PLE1205), the slip leads.
New type errors of a few classes (wrong arity, an unknown attribute or keyword, a possibly-unbound
name, calling None, an unawaited coroutine) come from mypy at the base and at head (`analyzers.types`),
started in the background when the analyzer is made; a call a broken caller already reports is not
reported again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from reviewers.analyzers.callers import CallerReport, find_broken_callers
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.imports import names_imported_from
from reviewers.analyzers.python2 import async_is_a_name, python2_project, without_python2_syntax
from reviewers.analyzers.redos import removed_code
from reviewers.analyzers.ruff import prefetch as ruff_prefetch
from reviewers.analyzers.ruff import ruff_issues, unused_import_binding
from reviewers.analyzers.slips import slip_issues
from reviewers.analyzers.types.background import TypeCheck
from reviewers.analyzers.types.plan import TypeReport
from reviewers.kernel.contracts import CoverageReason, ReviewContext, SearchHit
from reviewers.kernel.errors import AnalyzerError, InputError
from reviewers.paths import is_test_path, language_of
from reviewers.reviewer import Analysis, Analyzer, ReviewerSpec

INSTRUCTIONS = """You are the code-quality reviewer. Look for defects, not style: errors swallowed by bare or
blind excepts and empty catch blocks, mutable default arguments, undefined or unused names, closures
over loop variables, resources never closed, off-by-one and wrong-comparison bugs, dead code left
behind. Report only problems on lines this merge request added or changed, each with the exact code
line as evidence. Do not report formatting or naming preferences."""

CALL_RULES = frozenset({"types:call-arity", "types:unknown-keyword"})  # what a broken caller says already
CATCH_LANGUAGES = frozenset({"javascript", "typescript", "java", "csharp", "kotlin", "php", "cpp"})
_EMPTY_CATCH = re.compile(r"\bcatch\s*(?:\([^)]*\))?\s*\{\s*\}")


def _supports(path: str) -> bool:
    # Product code only: the analyzers now read every file a reviewer supports (issue 21), and test
    # code was never this reviewer's (the rule plan focused it on product code): fixtures and mocks
    # break style rules on purpose.
    if is_test_path(path):
        return False
    return language_of(path) == "python" or language_of(path) in CATCH_LANGUAGES


def empty_catch_issues(file: ChangedFile) -> list[Issue]:
    return [
        Issue(
            line,
            "quality:empty-catch",
            "medium",
            "Empty catch block swallows the error",
            "The error disappears without a trace, so a failure here becomes a silent wrong result. Handle it, "
            "log it, or let it propagate.",
            kind="swallowed-error",
        )  # fmt: skip
        for line, text in sorted(file.changed_lines.items())
        if _EMPTY_CATCH.search(text)
    ]


def without_reexports(file: ChangedFile, issues: list[Issue], context: ReviewContext) -> list[Issue]:
    """ruff's unused imports less the ones another module of the repository imports from this one
    (`from pkg.compat import Mapping`): ruff sees one file, the import is the module's re-export.
    One search of the repository per module with unused imports."""
    unused = [i for i in issues if i.rule == "ruff:F401"]
    if not unused:
        return issues
    try:
        imported = names_imported_from(context.workspace, file.path)
    except InputError:
        # the search engine refused the pattern (`reviewers.pattern_search`): which names other modules
        # import is unknown, so the unused imports go to a person rather than failing the review
        unsure = {id(i) for i in unused}
        return [replace(i, confidence="low") if id(i) in unsure else i for i in issues]
    reexported = {id(i) for i in unused if unused_import_binding(file.python_tree, i.line, i.title) in imported}
    return [i for i in issues if id(i) not in reexported]


def _make_analyzer(context: ReviewContext) -> Analyzer:
    project: dict[str, bool] = {}

    changed = {f.path for f in context.files}

    def search(pattern: str) -> list[SearchHit]:
        return context.workspace.search(pattern, max_hits=20)

    def is_python2_only() -> bool:  # the packaging files are read once per review, and only if asked
        if "python2" not in project:
            project["python2"] = python2_project(context.workspace.read_file, search, changed)
        return project["python2"]

    def reads_async_as_name() -> bool:  # a Python below 3.7, where `asyncio.async(...)` parses
        if "async_name" not in project:
            project["async_name"] = async_is_a_name(context.workspace.read_file, search, changed)
        return project["async_name"]

    removed = removed_code(context.files)  # what the change took out anywhere: a slip moved here is old
    callers: list[CallerReport] = []  # the review's broken callers, found once, on the first Python file
    in_scope = frozenset(p for p in changed if _supports(p))
    # the type checker is a process of its own: started now, it runs while ruff and the rest read the files
    types = TypeCheck(context, in_scope=in_scope) if any(p.endswith(".py") for p in in_scope) else None
    types_noted: list[bool] = []  # whether the review-wide coverage notes were handed out

    def type_errors(file: ChangedFile, already: list[Issue]) -> Analysis:
        if types is None:
            return Analysis()
        report: TypeReport = types.result()
        notes = list(report.notes.get(file.path, []))
        if not types_noted:
            types_noted.append(True)
            notes += report.notes.get("", [])
        taken = {i.line for i in already if i.rule == "calls:broken-caller"}
        issues = [
            i for i in report.issues.get(file.path, []) if not (i.line in taken and i.rule.startswith("types:call"))
        ]
        return Analysis(issues, incomplete=notes)

    def broken_callers(file: ChangedFile) -> Analysis:
        if callers:
            return Analysis(callers[0].issues.get(file.path, []))
        callers.append(find_broken_callers(context, in_scope=in_scope))
        cut = callers[0].cut_short
        incomplete: list[tuple[CoverageReason, str]] = [("budget", f"broken callers: {why}") for why in cut]
        return Analysis(callers[0].issues.get(file.path, []), incomplete=incomplete)

    def analyze(file: ChangedFile) -> Analysis:
        if file.language != "python":
            return Analysis(empty_catch_issues(file))
        # ours before ruff's, and whatever ruff does: on a line both report (B006 beside a mutated
        # default) the precise one leads, and ruff failing on this file loses neither
        calls = broken_callers(file)
        own = calls.issues + slip_issues(file, removed)
        try:
            issues = without_python2_syntax(file, ruff_issues(file), is_python2_only, reads_async_as_name)
            found, problems = own + without_reexports(file, issues, context), []
        except AnalyzerError as exc:
            found, problems = own, [str(exc)]
        typed = type_errors(file, calls.issues)  # last: the checker had the other analyzers' time to answer
        return Analysis(found + typed.issues, problems=problems, incomplete=calls.incomplete + typed.incomplete)

    return analyze


def _prefetch(context: ReviewContext, paths: Sequence[str]) -> None:
    ruff_prefetch(
        [(p, t) for p in paths if language_of(p) == "python" and (t := context.workspace.read_file(p)) is not None]
    )


CODE_QUALITY = ReviewerSpec(
    name="code_quality",
    description="defects rather than style: swallowed exceptions, mutable defaults, undefined/unused names, "
    "loop-closure bugs (ruff on Python)",
    instructions=INSTRUCTIONS,
    supports=_supports,
    make_analyzer=_make_analyzer,
    prefetch=_prefetch,
)
