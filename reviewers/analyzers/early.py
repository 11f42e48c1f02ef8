"""A review's analyzer processes, started as soon as its changed files are known.

bandit's checks (run by ruff) and semgrep's engine run as processes over every changed file they read
(their start-up costs more than one file's analysis, so each gets the whole review in one batch). They need nothing but
the files' texts at head, so they can start before the rest of the review — before a cold command
line has even imported the runtime that will read their answers (a second of imports for LangGraph
and its tracing, on one core, while the analyzers use the other). Their answers are kept by text
(`BatchAnswers`), so whoever asks for a file later, the reviewer or this start, gets the one answer.

mypy (`analyzers.types`) needs the change itself, its base and its callers: `start_type_check` starts
it on the trees the code-quality reviewer will build, which finds the answer by their contents (a
review whose configuration leaves some of the files out builds other trees and runs its own).

Which files: those the security reviewer hands each engine — Python that is not a test for bandit's checks,
the engine's languages outside tests for semgrep — and that the analyzers may read in full
(`unanalyzable`). Starting one the review then leaves out (a path the repository's configuration
excludes) costs a little CPU and changes no finding.
"""

from __future__ import annotations

from collections.abc import Sequence

from reviewers.analyzers.bandit import prefetch as bandit_prefetch
from reviewers.analyzers.changed_file import unanalyzable
from reviewers.analyzers.semgrep_taint import prefetch as engine_prefetch
from reviewers.analyzers.semgrep_taint import supports as engine_supports
from reviewers.analyzers.types import start_early as types_start_early
from reviewers.kernel.contracts import FileChange, ReviewContext, Workspace
from reviewers.paths import is_test_path


def start_analyzer_processes(files: Sequence[tuple[str, str]], *, deadline: float | None = None) -> None:
    """Start bandit's checks over the (path, text) pairs' product Python and the engine over their
    other languages, in the background; texts already answered or in flight are not started again."""
    readable = [(p, t) for p, t in files if not is_test_path(p) and unanalyzable(p, t) is None]
    bandit_prefetch([(p, t) for p, t in readable if p.endswith(".py")], background=True)
    engine_prefetch([(p, t) for p, t in readable if engine_supports(p)], deadline=deadline, background=True)


def start_type_check(files: Sequence[FileChange], workspace: Workspace) -> None:
    """Start the type check of the change's product Python files and their callers, in the background."""
    if any(f.path.endswith(".py") and f.status != "deleted" and not is_test_path(f.path) for f in files):
        types_start_early(ReviewContext(title="", description="", files=list(files), workspace=workspace))
