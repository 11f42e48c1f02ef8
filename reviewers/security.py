"""The security reviewer: secrets, injection, unsafe deserialization, traversal, weakened settings.

Its analyzer runs, in order of precision: the secret scanner; instructions addressed to AI
reviewers (prompt injection); the Python taint analysis with summaries of the repository's functions
shared by every file of the review, or for JavaScript/TypeScript, Go and Java our taint rules on
semgrep's engine (`semgrep_taint`, one engine run per review); the line rules for what neither
covers; the settings check; and bandit's checks (run by ruff). What the analyses' budgets cut short
is named in the review. Test files get only the vendor-prefix secret scan and the words aimed at
reviewers: fixtures are full of fake passwords and disabled verification.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from reviewers.analyzers.bandit import bandit_issues
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.config_changes import security_setting_issues
from reviewers.analyzers.early import start_analyzer_processes
from reviewers.analyzers.patterns import line_rule_issues
from reviewers.analyzers.prompt_injection import prompt_injection_issues
from reviewers.analyzers.python_security import analyse_security, project_for
from reviewers.analyzers.redos import redos_issues
from reviewers.analyzers.secrets import scan_secrets, secret_issues
from reviewers.analyzers.semgrep_taint import ENGINE_KINDS, engine_issues
from reviewers.analyzers.semgrep_taint import supports as engine_supports
from reviewers.kernel.contracts import ReviewContext
from reviewers.kernel.errors import AnalyzerError
from reviewers.paths import is_test_path
from reviewers.reviewer import Analysis, Analyzer, ReviewerSpec

INSTRUCTIONS = """You are the security reviewer. Look for what an attacker could use: hard-coded credentials,
SQL/shell/code injection (values spliced into queries, commands, eval), unsafe deserialization (pickle,
yaml.load), paths built from caller-supplied names without a containment check, TLS or signature
verification switched off, and security settings weakened (longer session/token lifetimes, debug on,
CORS open, auth or CSRF off). Report only problems on lines this merge request added or changed,
each with the exact code line as evidence. Prefer a few certain findings to many guesses."""


def _supports(path: str) -> bool:
    return True  # secrets and weakened settings hide in every kind of text file


def _make_analyzer(context: ReviewContext) -> Analyzer:
    # one project per review: the summaries of the repository's functions serve every changed file
    project = project_for(
        context.workspace.read_file, list_paths=context.workspace.list_paths, past_deadline=context.past_deadline
    )

    def analyze(file: ChangedFile) -> Analysis:
        if is_test_path(file.path):
            return Analysis(secret_issues(file, named_values=False) + prompt_injection_issues(file, test_file=True))
        scan = scan_secrets(file)
        analysis = Analysis(scan.issues + prompt_injection_issues(file))
        if scan.cut_short:
            analysis.incomplete.append(("budget", f"secrets scan: {scan.cut_short}"))
        security = analyse_security(file, project)
        tree_issues = security.issues if security is not None else None
        analysis.issues += tree_issues or []
        if security is not None and security.cut_short:
            analysis.incomplete.append((security.cut_reason, f"taint analysis: {security.cut_short}"))
        if security is not None and security.base_unread:
            analysis.incomplete.append(("parse-error", f"removed guards not looked for: {security.base_unread}"))
        engine_done: frozenset[str] = frozenset()
        if engine_supports(file.path):
            found, incomplete = engine_issues(file, deadline=context.deadline)
            analysis.issues += found
            if incomplete is None:
                engine_done = ENGINE_KINDS
            else:
                analysis.incomplete.append(incomplete)
        analysis.issues += line_rule_issues(file, python_ast_done=tree_issues is not None, covered_kinds=engine_done)
        analysis.issues += security_setting_issues(file)
        redos = redos_issues(file)  # the change's regular expressions, on a kept engine (CWE-1333)
        analysis.issues += redos.issues
        analysis.incomplete += redos.unchecked
        if tree_issues is not None:  # bandit's checks are asked only of Python that parses
            try:
                analysis.issues += [_judged_by_flow(i) for i in bandit_issues(file)]
            except AnalyzerError as exc:
                analysis.problems.append(str(exc))
        return analysis

    return analyze


def _safe_scan(file: ChangedFile) -> tuple[list[Issue], str]:
    """The secrets scan, on a file the full analyzer does not read: reading a generated, huge or
    oddly encoded file for credentials is linear and executes nothing."""
    scan = scan_secrets(file, named_values=not is_test_path(file.path))
    done = "secrets scanned only" + (f" ({scan.cut_short})" if scan.cut_short else "")
    return scan.issues, done


# bandit checks that judge a sink by the call alone (eval, exec, pickle, yaml.load, a shell, md5, a
# value marked safe HTML with Markup / mark_safe; B614 and B703, which ruff lacks, are no longer asked):
# where the taint analysis read the file, it has already said whether request data reaches the call,
# so bandit's word on it goes to a person (NEEDS_HUMAN_REVIEW), never straight to a thread.
SINK_ONLY_BANDIT = frozenset(
    {"bandit:B102", "bandit:B307", "bandit:B301", "bandit:B302", "bandit:B506", "bandit:B602", "bandit:B604",
     "bandit:B605", "bandit:B324", "bandit:B303", "bandit:B704"}
)  # fmt: skip


def _judged_by_flow(issue: Issue) -> Issue:
    return replace(issue, confidence="low") if issue.rule in SINK_ONLY_BANDIT else issue


def _prefetch(context: ReviewContext, paths: Sequence[str]) -> None:
    """bandit's checks (ruff) over the Python files and semgrep's engine over the others, each in its
    own processes, both in the background: the taint analysis of the first files runs meanwhile, and a file's
    analysis waits for their answers only when it needs them. Test files are read for secrets only."""
    files = [(p, t) for p in paths if (t := context.workspace.read_file(p)) is not None]
    start_analyzer_processes(files, deadline=context.deadline)


SECURITY = ReviewerSpec(
    name="security",
    description="secrets, request data reaching SQL/shell/eval/files/redirects/XML/LDAP/HTML, deserialization, "
    "cookie flags, weak random/hash, TLS off, weak settings",
    instructions=INSTRUCTIONS,
    supports=_supports,
    make_analyzer=_make_analyzer,
    prefetch=_prefetch,
    safe_analyzer=_safe_scan,
)
