"""Guards that are calls: a repository validator on its own line, a sanitizer an argument went
through (in the expression or inside a short helper), and a helper that raises unless the content
of what it is given passes (`checks.checked_parameters`)."""

from __future__ import annotations

import ast

from reviewers.analyzers.flow.project import FunctionNode
from reviewers.analyzers.flow.rules import ALL_CLASSES, SANITISERS
from reviewers.analyzers.guard_removal.checks import argument_names, checked_parameters
from reviewers.analyzers.guard_removal.model import Guard
from reviewers.analyzers.guard_removal.model import dotted as _dotted
from reviewers.analyzers.guard_removal.scan_base import _NOTHING, ScanBase, _text
from reviewers.analyzers.guard_removal.validators import judge_call, repository_function
from reviewers.analyzers.guard_removal.views import named_for_checking

# A helper whose body raises unless what it is given passes a check, named for nothing of the kind
# (`fetch_checkout_data(info, lines)`): it stands in for a guard that moved into it, but what it checks
# may be business rules, so its removal is not reported (`report`). Named for checking or cleaning
# (`sanitise_url_path`), it is a validator like any other.
HELPER_CHECK = "checked-by-helper"
# A helper that applies a sanitizer for its caller is short; a longer function does more than clean
# its argument, and is not read for one.
MAX_WRAPPER_LINES = 15


class SanitizerGuards(ScanBase):
    """The guards that calls are; `protections.ModuleScan` carries them to the sinks."""

    qualified_of: dict[int, str]
    _sanitized: dict[int, Guard | None]
    _wrappers: dict[int, tuple[str, frozenset[str], str] | None]
    _local_defs: dict[str, FunctionNode]
    _checked: dict[int, frozenset[str]]

    def _checking_call(self, call: ast.Call, stmt: ast.stmt) -> list[Guard]:
        """A call on its own line that raises unless its argument is safe: a repository validator
        judged by its body, or, when its body says nothing, one named for checking."""
        judgement = judge_call(self.project, self.info, call.func)
        names = frozenset(n for a in call.args for n in self.names(a))
        text = _text(self.lines, stmt)
        if judgement is not None:
            if not judgement.works:
                self.broken.setdefault(self._current, {})[_dotted(call.func)] = judgement.why
            works = judgement.works
            return [Guard("validator", judgement.classes, names, stmt.lineno, text, leaves=True)] if works else []
        short = _dotted(call.func).rsplit(".", 1)[-1].lower()
        target = repository_function(self.project, self.info, call.func) if names else None
        if target is not None and named_for_checking(short):
            return [Guard("validator", ALL_CLASSES | {"dos"}, names, stmt.lineno, text, leaves=True)]
        if target is not None and (checked := self._checked_arguments(call, target)):
            return [Guard(HELPER_CHECK, ALL_CLASSES | {"dos"}, checked, stmt.lineno, text, leaves=True)]
        return []

    def _checked_arguments(self, call: ast.Call, target: FunctionNode) -> frozenset[str]:
        """The names of the arguments a repository helper raises on unless their content passes."""
        if id(target) not in self._checked:
            self._checked[id(target)] = checked_parameters(target)
        wanted = self._checked[id(target)]
        return frozenset(n for a in argument_names(call, target, wanted) for n in self.names(a)) if wanted else _NOTHING

    def _sanitizers(self, expr: ast.expr) -> list[Guard]:
        """The sanitizers (and repository validators that return the cleaned value) in an expression."""
        out: list[Guard] = []
        for node in self.subtree(expr)[1]:
            if isinstance(node, ast.Call):
                if id(node) not in self._sanitized:
                    self._sanitized[id(node)] = self._sanitizer(node)
                if (guard := self._sanitized[id(node)]) is not None:
                    out.append(guard)
        return out

    def _sanitizer(self, node: ast.Call) -> Guard | None:
        name = self.qualified_of.get(id(node)) or self.qualified(node.func)
        short = name.rsplit(".", 1)[-1]
        names = frozenset(n for a in node.args for n in self.names(a))
        if not any(self._is_local(n) for n in names):
            return None  # `urlencode({"token": settings.TOKEN})` cleans nothing that comes from outside
        text = _text(self.lines, node)
        classes = SANITISERS.get(name) or SANITISERS.get(short)
        if classes is not None:
            family = "safe-join" if short == "safe_join" else "escape" if "xss" in classes else "sanitizer"
            return Guard(family, classes, names, node.lineno, text, key=short)
        if (judgement := judge_call(self.project, self.info, node.func)) is not None and judgement.works:
            return Guard("validator", judgement.classes, names, node.lineno, text)
        target = repository_function(self.project, self.info, node.func) if names else None
        if judgement is None and target is not None and (checked := self._checked_arguments(node, target)):
            named = named_for_checking(short, ("sanitise", "sanitize", "clean"))
            return Guard("validator" if named else HELPER_CHECK, ALL_CLASSES, checked, node.lineno, text)
        if (inner := self._wrapped_sanitizer(node.func)) is not None:
            return Guard(inner[0], inner[1], names, node.lineno, text, key=inner[2])
        return None

    def _wrapped_sanitizer(self, func: ast.expr) -> tuple[str, frozenset[str], str] | None:
        """(family, classes, key) of the sanitizer a repository or nested function applies to what it
        is given: `def conditional_escape(text): return escape(text) if autoescape else text` escapes.
        A sanitizer moved into a helper is still applied."""
        target = repository_function(self.project, self.info, func)
        if target is None and isinstance(func, ast.Name):
            target = self._local_defs.get(func.id)
        if target is None or (target.end_lineno or target.lineno) - target.lineno > MAX_WRAPPER_LINES:
            return None
        if id(target) not in self._wrappers:
            found: tuple[str, frozenset[str], str] | None = None
            for node in ast.walk(target):
                if isinstance(node, ast.Call):
                    name = self.qualified(node.func)
                    short = name.rsplit(".", 1)[-1]
                    classes = SANITISERS.get(name) or SANITISERS.get(short)
                    if classes is not None:
                        family = "safe-join" if short == "safe_join" else "escape" if "xss" in classes else "sanitizer"
                        found = (family, classes, short)
                        break
            self._wrappers[id(target)] = found
        return self._wrappers[id(target)]
