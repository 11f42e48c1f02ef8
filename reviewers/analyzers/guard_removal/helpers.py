"""Repository functions that are sinks for their callers: `self.tx_file(static_path)` opens the file
it is given, so a check removed in front of that call stood in front of `open` (issue 39, item 3).

The flow engine's summaries say which parameter of a function reaches which sink class inside it
(or inside its callees), and which classes were cleared on the way. A call feeds a class when an
argument that is not a constant fills such a parameter and nothing inside cleared that class: a
helper that checks what it is given (the guard moved into the callee) is no sink for its callers.

Both versions of a changed file are read against the helper as it is at head, so a helper that
did the same work before and after the change is the same sink on both sides. A helper that
refuses what it is given on a check of its content (`if not ...startswith(ROOT): return`) holds the
guard itself: it moved there, and the call is no sink.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from reviewers.analyzers.flow.calls import summarize
from reviewers.analyzers.flow.project import ModuleInfo, Project
from reviewers.analyzers.guard_removal.checks import checked_parameters
from reviewers.analyzers.guard_removal.families import CLASS_CWE
from reviewers.analyzers.guard_removal.model import dotted

_RECEIVERS = ("self", "cls")


def _target(project: Project, info: ModuleInfo, call: ast.Call, scope: str) -> tuple[ModuleInfo, str, bool] | None:
    """(module at head, qualified name, called as a method) of the repository function a call names."""
    name = dotted(call.func)
    if not name or isinstance(call.func, ast.Call):
        return None
    head = project.modules.get(info.path) or info
    receiver, _, method = name.partition(".")
    if receiver in _RECEIVERS and method and "." not in method and "." in scope:
        qualname = f"{scope.split('.')[0]}.{method}"
        return (head, qualname, True) if qualname in head.functions else None
    if name in head.functions and "." not in name:
        return head, name, False
    first, _, rest = name.partition(".")
    imported = info.aliases.get(first)
    if imported is None:
        return None
    found = project.resolve(f"{imported}.{rest}" if rest else imported, info.path)
    if found is None or found[1] not in found[0].functions or "." in found[1]:
        return None
    return found[0], found[1], False


def helper_sink_classes(
    project: Project, info: ModuleInfo, call: ast.Call, scope: str, is_const: Callable[[ast.expr], bool]
) -> frozenset[str]:
    """The sink classes a repository function reaches with what this call gives it."""
    target = _target(project, info, call, scope)
    if target is None or project.summary_cut() is not None:
        return frozenset()
    module, qualname, method = target
    try:
        summary = summarize(project, module, qualname)
    except RecursionError:
        return frozenset()
    if not summary.sinks:
        return frozenset()
    params = list(summary.params[1:] if method else summary.params)
    given: dict[str, ast.expr] = dict(zip(params, call.args, strict=False))
    given.update({k.arg: k.value for k in call.keywords if k.arg})
    refused = checked_parameters(module.functions[qualname], any_exit=True)  # the guard moved into it
    out: set[str] = set()
    for sink in summary.sinks:
        arg = given.get(sink.param)
        if arg is None or is_const(arg) or sink.param in refused:
            continue
        if sink.cls in sink.cleared or sink.cls not in CLASS_CWE:
            continue
        out.add(sink.cls)
    return frozenset(out)
