"""The architecture reviewer: imports that cross layers the wrong way or close import cycles.

Layer rules come from the repository's configuration; without them the conventional direction
(domain code does not import the web/API/CLI layer) is checked. Cycles are searched in the import
graph of the files at head, starting from each import the change added.
"""

from __future__ import annotations

from reviewers.analyzers.changed_file import ChangedFile
from reviewers.analyzers.layers import ArchitectureAnalyzer
from reviewers.kernel.contracts import ReviewContext
from reviewers.paths import is_test_path, language_of
from reviewers.reviewer import Analysis, Analyzer, ReviewerSpec

INSTRUCTIONS = """You are the architecture reviewer. Look at the dependencies this merge request adds: imports
that break the repository's layering (domain or core code importing web, API, CLI or UI code; a layer
importing one it may not), new import cycles, and code placed in a module that does not own that
concern. Report at the import or definition line this merge request added, with that exact line as
evidence, and say which direction the dependency should point."""

IMPORT_LANGUAGES = frozenset({"python", "javascript", "typescript"})


def _supports(path: str) -> bool:
    # Product code only (as the rule plan always focused it): a test imports across layers to test them.
    return language_of(path) in IMPORT_LANGUAGES and not is_test_path(path)


def _make_analyzer(context: ReviewContext) -> Analyzer:
    checker: ArchitectureAnalyzer | None = None

    def analyze(file: ChangedFile) -> Analysis:
        nonlocal checker
        if checker is None:  # the module index reads the path list once, and only when needed
            checker = ArchitectureAnalyzer(context.workspace, context.config.layers, context.files)
        return Analysis(checker.issues(file))

    return analyze


ARCHITECTURE = ReviewerSpec(
    name="architecture",
    description="layering and dependency direction (configured layers or domain-must-not-import-web), "
    "new import cycles",
    instructions=INSTRUCTIONS,
    supports=_supports,
    make_analyzer=_make_analyzer,
)
