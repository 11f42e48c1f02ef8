"""The test-impact reviewer: what the change does to the test suite, found by reading tests.

Four questions, each answered from the files at head without running anything:
- a new public function or class that no test mentions;
- a changed signature whose tests mention it but were not touched by this merge request;
- a constant whose value changed while tests that exercise it (directly, or through the functions
  of its module that read it) were not touched — a test using a value between the old and the new
  one is named as the one whose outcome flips;
- a removed public definition that unchanged tests still mention.
"""

from __future__ import annotations

import re

from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.config_changes import numeric_value, value_changes
from reviewers.analyzers.symbols import (
    Definition,
    gone_definition_names,
    is_new,
    public_definitions,
    removed_definition_names,
    signature_changed,
)
from reviewers.analyzers.tests_lookup import TestIndex, TestReference, is_test_path, list_test_functions
from reviewers.kernel.contracts import ReviewContext, language_of
from reviewers.reviewer import Analysis, Analyzer, ReviewerSpec

INSTRUCTIONS = """You are the test-impact reviewer. For each changed public function, class or constant, use
list_tests and read_file to find the tests that exercise it. Report new public code that no test
exercises (at its definition line), and changed behaviour (a changed constant, signature or return
value) whose tests were not updated in this merge request — name the test that will now fail or
is now wrong. Report at a line this merge request added, with that exact line as evidence."""

CODE_LANGUAGES = frozenset(
    {"python", "javascript", "typescript", "go", "rust", "java", "kotlin", "csharp", "ruby", "php"}
)
# Entry points, packaging and schema files are exercised by running the program, not by unit tests.
_NOT_UNIT_TESTED = re.compile(
    r"(?:^|/)(?:migrations?|alembic|scripts?|docs?|examples?)/|(?:^|/)(?:setup|manage|__main__)\.py$"
)
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
MAX_TESTS_NAMED = 3  # a finding that lists ten tests is read as "many"; three make the point


def _supports(path: str) -> bool:
    return language_of(path) in CODE_LANGUAGES and not is_test_path(path) and not _NOT_UNIT_TESTED.search(path)


def _names(refs: list[TestReference]) -> str:
    named = [f"{r.path}::{t}" for r in refs for t in r.tests] or [r.path for r in refs]
    more = f" and {len(named) - MAX_TESTS_NAMED} more" if len(named) > MAX_TESTS_NAMED else ""
    return ", ".join(named[:MAX_TESTS_NAMED]) + more


def _flipping_tests(index: TestIndex, refs: list[TestReference], low: float, high: float) -> list[str]:
    """Tests whose bodies use a number in (low, high]: inputs on which the old and new value disagree."""
    flips: list[str] = []
    for ref in refs:
        text = index.text(ref.path) or ""
        lines = text.splitlines()
        for name, start, end in list_test_functions(text, ref.path):
            if name not in ref.tests:
                continue
            body = "\n".join(lines[start - 1 : end])
            if any(low < float(n) <= high for n in _NUMBER.findall(body)):
                flips.append(f"{ref.path}::{name}")
    return flips


class TestImpactAnalyzer:
    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, context: ReviewContext) -> None:
        self.context = context
        self.changed_tests = {f.path for f in context.files if is_test_path(f.path)}
        self._index: TestIndex | None = None

    @property
    def index(self) -> TestIndex:
        if self._index is None:
            self._index = TestIndex(self.context.workspace)
        return self._index

    def stale(self, refs: list[TestReference]) -> list[TestReference]:
        """The referencing tests, if none of them was touched by this change; else nothing to say."""
        return [] if any(r.path in self.changed_tests for r in refs) else refs

    def definition_issues(self, file: ChangedFile, definitions: list[Definition], removed: set[str]) -> list[Issue]:
        issues: list[Issue] = []
        new_classes = {d.name for d in definitions if d.kind == "class" and is_new(d, file, removed)}
        for d in definitions:
            if d.owner in new_classes:
                continue  # the class's own finding covers its methods
            if is_new(d, file, removed):
                if d.has_behaviour and not self.index.references(file.path, d.name):
                    issues.append(
                        Issue(
                            d.line,
                            "tests:untested-new",
                            "medium",
                            f"No test exercises new {d.kind} {d.qualified}",
                            f"`{d.qualified}` is new in this merge request and no test mentions it. Add a test for "
                            "its expected behaviour and at least one edge case.",
                            kind="untested",
                        )  # fmt: skip
                    )
            elif signature_changed(d, file, removed):
                stale = self.stale(self.index.references(file.path, d.name))
                if stale:
                    issues.append(
                        Issue(
                            d.line,
                            "tests:stale-signature",
                            "medium",
                            f"Signature of {d.qualified} changed; its tests were not updated",
                            f"The definition line of `{d.qualified}` changed, and {_names(stale)} still call it as "
                            "before. Update the tests to the new signature and cover the new parameters.",
                            kind="stale-tests",
                        )  # fmt: skip
                    )
        return issues

    def constant_issues(self, file: ChangedFile, definitions: list[Definition]) -> list[Issue]:
        issues: list[Issue] = []
        for change in value_changes(file):
            if change.old is None or not _CONSTANT.match(change.key):
                continue
            word = re.compile(rf"\b{re.escape(change.key)}\b")
            readers = [
                d.name
                for d in definitions
                if d.kind != "class" and any(word.search(file.line_text(n)) for n in range(d.line, d.end_line + 1))
            ]
            refs: dict[str, TestReference] = {}
            for symbol in [change.key, *readers]:
                for ref in self.index.references(file.path, symbol):
                    known = refs.get(ref.path)
                    tests = tuple(dict.fromkeys((*known.tests, *ref.tests))) if known else ref.tests
                    refs[ref.path] = TestReference(ref.path, ref.line, ref.text, tests)
            stale = self.stale(list(refs.values()))
            if not stale:
                continue
            old, new = numeric_value(change.old), numeric_value(change.new)
            flips = (
                _flipping_tests(self.index, stale, min(old, new), max(old, new))
                if old is not None and new is not None
                else []
            )
            via = f" (through {', '.join(readers)})" if readers else ""
            if flips:
                title = f"{change.key} changed; {flips[0]} now tests a different outcome"
                detail = (
                    f"{', '.join(flips[:MAX_TESTS_NAMED])} use a value between the old ({change.old}) and the new "
                    f"({change.new}) value of `{change.key}`{via}, so their expected result flips; they were not "
                    "updated in this merge request."
                )
            else:
                title = f"{change.key} changed; the tests that exercise it were not updated"
                detail = f"{_names(stale)} exercise `{change.key}`{via} and were not updated in this merge request."
            issues.append(
                Issue(
                    change.line,
                    "tests:stale-constant",
                    "medium",
                    title[:200],
                    f"`{change.key}` changed from {change.old} to {change.new}. {detail} Update the tests to pin the "
                    "new value, or confirm the old expectations still hold.",
                    kind="stale-tests",
                )  # fmt: skip
            )
        return issues

    def removal_issues(self, file: ChangedFile) -> list[Issue]:
        issues: list[Issue] = []
        for name in sorted(n for n in gone_definition_names(file) if not n.startswith("_")):
            stale = self.stale(self.index.references(file.path, name))
            anchor = self._anchor_for_removal(file, name)
            if stale and anchor is not None:
                issues.append(
                    Issue(
                        anchor,
                        "tests:removed-symbol",
                        "high",
                        f"{name} was removed but tests still use it",
                        f"`{name}` no longer exists in `{file.path}`, and {_names(stale)} still use it: they will fail "
                        "to import or call it.",
                        kind="stale-tests",
                    )  # fmt: skip
                )
        return issues

    @staticmethod
    def _anchor_for_removal(file: ChangedFile, name: str) -> int | None:
        """Where the removed definition stood: the next new-side line after it in its hunk (an added
        line that replaced it, or the context that follows), else the last new-side line before it."""
        pattern = re.compile(rf"\b(?:def|class|function|func|fn|fun)\s+{re.escape(name)}\b")
        for hunk in file.change.hunks:
            lines = list(hunk.lines)
            at = next((i for i, ln in enumerate(lines) if ln.kind == "del" and pattern.search(ln.text)), None)
            if at is None:
                continue
            after = [ln.new_line for ln in lines[at:] if ln.new_line is not None]
            before = [ln.new_line for ln in lines[:at] if ln.new_line is not None]
            line = after[0] if after else before[-1] if before else hunk.new_start
            return line if 1 <= line <= len(file.lines) else None
        return None

    def __call__(self, file: ChangedFile) -> Analysis:
        definitions = public_definitions(file)
        removed = removed_definition_names(file)
        issues = self.definition_issues(file, definitions, removed)
        issues += self.constant_issues(file, definitions)
        issues += self.removal_issues(file)
        problems = [f"only the first {len(self.index.paths)} test files were read"] if self.index.truncated else []
        return Analysis(issues, problems)


def _make_analyzer(context: ReviewContext) -> Analyzer:
    return TestImpactAnalyzer(context)


TEST_IMPACT = ReviewerSpec(
    name="test_impact",
    description="new public code without tests; changed constants/signatures whose tests were not updated; "
    "removed code still used by tests",
    instructions=INSTRUCTIONS,
    supports=_supports,
    make_analyzer=_make_analyzer,
)
