"""Security checks on Python: data followed from where it enters to where it does harm.

The taint interpreter (`reviewers.analyzers.flow`) runs over every function of the changed file,
with summaries of the repository functions it calls (read at head); each finding names its CWE:

- request data reaching a sink — SQL (CWE-89), a shell or a program (78), eval/exec (94), a
  deserialiser that runs code (502), a file path (22), a redirect (601), a parser resolving external
  entities (611), XPath (643), LDAP (90), an HTML response (79), the session (501), a template's
  source (1336), an outbound URL (918) — is high confidence (REAL);
- a value of unknown origin (a parameter no known caller fills from a request) reaching SQL text
  with values spliced in, a shell, eval or a deserialiser is low confidence: a person looks first;
- a `random` value stored as a token, password, salt or session id (330);
- a guard, sanitizer or hardening option the change took away in front of a call that remains
  (`guard_removal`: base and head both read; the removed base line is quoted);
- the syntax-level rules of `python_hardening` (cookie flags 614/1004, weak hashes 328, hard-coded
  credentials 798) and `python_auth` (timing-unsafe compare 208, fast password hash 916, TLS off 295).

Only lines the change added are reported. A sink fed only by constants never fires. What the
interpreter could not finish (its step budget, or the review's deadline) is returned as
`cut_short`, to be named in the review.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.flow.engine import Hit, analyse_module
from reviewers.analyzers.flow.project import DEADLINE_CUT, MAX_SUMMARY_STEPS, Project
from reviewers.analyzers.flow.rules import SINKS
from reviewers.analyzers.guard_removal.report import removed_guard_issues
from reviewers.analyzers.parsing import parse_module
from reviewers.analyzers.python_auth import auth_issues
from reviewers.analyzers.python_hardening import hardening_issues
from reviewers.kernel.contracts import Confidence, CoverageReason, Severity

AUTH_CWE = {
    "python:timing-unsafe-compare": "CWE-208",
    "python:weak-password-hash": "CWE-916",
    "python:tls-verify-disabled": "CWE-295",
}


def _parse(text: str, path: str) -> ast.Module | None:
    """Every syntax tree this analyzer reads comes through here (one place to change the parser)."""
    return parse_module(text, filename=path)


def project_for(
    read_file: Callable[[str], str | None],
    *,
    list_paths: Callable[[], list[str]] | None = None,
    step_budget: int = MAX_SUMMARY_STEPS,
    past_deadline: Callable[[], bool] | None = None,
) -> Project:
    """A project over the files at head, for one review (summaries are shared across its files).
    `past_deadline` is the review's deadline, a safety net behind the step budget."""
    project = Project(read_file=read_file, parse=_parse, list_paths=list_paths, step_budget=step_budget)
    if past_deadline is not None:
        project.past_deadline = past_deadline
    return project


@dataclass
class SecurityAnalysis:
    issues: list[Issue] = field(default_factory=list)
    cut_short: str | None = None
    cut_reason: CoverageReason = "budget"  # "deadline" when the review's deadline cut a summary
    # why the guards the change removed were not looked for (the base could not be rebuilt or read)
    base_unread: str | None = None


def _scopes(tree: ast.Module) -> list[tuple[ast.AST, list[ast.AST]]]:
    """Each function (and the module, with its class bodies) with the nodes that belong to it,
    nested functions excluded; one pass over the tree serves every syntax rule."""
    owned: dict[int, list[ast.AST]] = {id(tree): []}
    roots: list[ast.AST] = [tree]
    stack: list[tuple[ast.AST, ast.AST]] = [(child, tree) for child in ast.iter_child_nodes(tree)]
    while stack:
        node, owner = stack.pop()
        owned[id(owner)].append(node)
        inner = owner
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            owned[id(node)] = []
            roots.append(node)
            inner = node
        elif isinstance(node, ast.Lambda):
            continue  # a lambda's body is an expression of its own: no statement rules apply
        for child in ast.iter_child_nodes(node):
            stack.append((child, inner))
    return [(root, owned[id(root)]) for root in roots]


def _first_changed(file: ChangedFile, node: ast.AST) -> int | None:
    line = getattr(node, "lineno", 0)
    end = getattr(node, "end_lineno", None) or line
    return next((n for n in range(line, end + 1) if file.is_changed(n)), None)


def _call_key(call: ast.Call) -> tuple[str, tuple[str, ...]]:
    return ast.unparse(call.func), tuple(ast.unparse(a) for a in call.args)


def _base_calls(file: ChangedFile) -> frozenset[tuple[str, tuple[str, ...]]]:
    """The calls of the file before the change, by callee and positional arguments: a value of
    unknown origin reaching a call that was already there with the same arguments is no news of
    this change (`yaml.load(text)` given `Loader=yaml.FullLoader` made it safer; an option the
    change weakened is `guard_removal`'s finding, with the removed line quoted)."""
    if file.change.status not in ("modified", "renamed") or not file.change.hunks:
        return frozenset()
    base_text = reverse_patch(file.text, file.change)
    tree = _parse(base_text, file.change.old_path or file.path) if base_text is not None else None
    if tree is None:
        return frozenset()
    return frozenset(_call_key(n) for n in ast.walk(tree) if isinstance(n, ast.Call))


def _from_command_line(title: str) -> str:
    return title.replace("request data", "the program's command line").replace(
        "Request data", "The program's command line"
    )


def _hit_issue(hit: Hit, line: int) -> Issue:
    spec = SINKS[hit.cls]
    via = f" inside the call, at {hit.via}" if hit.via else ""
    if hit.confidence == "high":
        # SQL from the command line is still a finding (the program holds the credentials), but it
        # says where the data comes from: an operator's argument is not a web request's
        title = _from_command_line(spec.title) if hit.command_line else spec.title
        body = f"{spec.body} Here {hit.origin} reaches {hit.call}{via}."
        severity: Severity = spec.severity
        confidence: Confidence = "high"
    elif hit.whole:
        title = spec.title.replace("built from request data", "taken whole from request data")
        body = (
            f"Here {hit.origin} is the whole statement {hit.call}{via} runs: not an injection into the "
            "program's own SQL but SQL its caller chooses, by design (a query console) or by mistake. A "
            "person should check who can reach it, and that it runs read-only with the least privilege."
        )
        severity, confidence = "medium", "low"
    elif hit.command_line:
        title = _from_command_line(spec.title)
        body = (
            f"{spec.body} Here {hit.origin} reaches {hit.call}{via}. A command line is its operator's own input, "
            "so this matters only where others choose it (a wrapper, sudo, a job fed by others): a person should check."
        )
        severity, confidence = "medium", "low"
    else:
        title = spec.title.replace("request data", "a value of unknown origin")
        body = (
            f"{spec.body} Here {hit.origin} reaches {hit.call}{via}; no caller in this change is known to pass "
            "request data, so a person should check where it comes from."
        )
        severity, confidence = "medium", "low"
    return Issue(line, spec.rule, severity, title, body, kind=spec.kind, confidence=confidence, cwe=spec.cwe)


def analyse_security(file: ChangedFile, project: Project | None = None) -> SecurityAnalysis | None:
    """The syntax-tree and data-flow checks, or None when the file is not Python that parses."""
    if file.language != "python":
        return None
    tree = _parse(file.text, file.path)
    if tree is None:
        return None
    if project is None:
        project = project_for(lambda path: file.text if path == file.path else None)
    info = project.add(file.path, tree)
    unfinished_before = len(project.unfinished)
    out = SecurityAnalysis()
    seen: set[tuple[int, str]] = set()
    base_calls: frozenset[tuple[str, tuple[str, ...]]] | None = None
    for hit, _scope in analyse_module(project, info):
        line = (_first_changed(file, hit.built) if hit.built is not None else None) or _first_changed(file, hit.node)
        if line is None or (line, hit.cls) in seen:
            continue
        if hit.confidence == "low" and not hit.via and isinstance(hit.node, ast.Call):
            base_calls = _base_calls(file) if base_calls is None else base_calls
            if _call_key(hit.node) in base_calls:
                continue  # the call was there with these arguments: the change only set its options
        seen.add((line, hit.cls))
        out.issues.append(_hit_issue(hit, line))
    # high confidence first, so that a merge keeps the stronger statement of one line
    out.issues.sort(key=lambda i: (i.confidence != "high", i.line))
    scopes = _scopes(tree)
    for node, rule, kind, severity, title, body, cwe, confidence in hardening_issues(scopes, info.aliases):
        if (line := _first_changed(file, node)) is not None:
            out.issues.append(Issue(line, rule, severity, title, body, kind=kind, confidence=confidence, cwe=cwe))
    constants = frozenset(
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign | ast.AnnAssign) and isinstance(n.value, ast.Constant)
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    )
    for root, nodes in scopes:
        for node, rule, kind, severity, title, body in auth_issues(root, nodes, info.aliases, constants):
            if (line := _first_changed(file, node)) is not None:
                out.issues.append(Issue(line, rule, severity, title, body, kind=kind, confidence="high",
                                        cwe=AUTH_CWE.get(rule)))  # fmt: skip
    if file.change.status in ("modified", "renamed") and file.change.hunks:
        base_text = reverse_patch(file.text, file.change)
        removed = (
            removed_guard_issues(file, base_text, file.change.old_path or file.path, project)
            if base_text is not None
            else None
        )
        if removed is None:  # a base that cannot be rebuilt or read makes no claim about what was removed
            out.base_unread = (
                "the file before the change could not be rebuilt from the diff"
                if base_text is None
                else "a version of the file does not parse or is over the scan's step budget"
            )
        else:
            # first: on a line another rule also reports (`verify=False`, `==` on a signature), the
            # removed guard leads the merged issue, since the change itself is its evidence
            out.issues = removed + out.issues
    out.cut_short = project.describe_unfinished(since=unfinished_before)
    if DEADLINE_CUT in list(project.unfinished.values())[unfinished_before:]:
        out.cut_reason = "deadline"
    return out


def python_security_issues(file: ChangedFile, project: Project | None = None) -> list[Issue] | None:
    """The issues of `analyse_security`, or None when the file is not Python that parses."""
    analysis = analyse_security(file, project)
    return analysis.issues if analysis is not None else None


FlowKey = tuple[str, str, str, str]  # sink class, origin, sink call, where inside a called function


def request_flows(text: str, path: str, read_file: Callable[[str], str | None]) -> list[tuple[FlowKey, int, int]]:
    """Every high-confidence flow in one version of a module, with the lines its sink call (or the
    text spliced for it) spans; other modules are read through `read_file`. Empty when it does not parse."""
    tree = _parse(text, path)
    if tree is None:
        return []
    project = project_for(lambda p: text if p == path else read_file(p))
    out: list[tuple[FlowKey, int, int]] = []
    for hit, _scope in analyse_module(project, project.add(path, tree)):
        if hit.confidence != "high":
            continue
        key = (hit.cls, hit.origin, hit.call, hit.via)
        for node in (hit.node, hit.built):
            if node is not None:
                line = getattr(node, "lineno", 0)
                out.append((key, line, getattr(node, "end_lineno", None) or line))
    return out
