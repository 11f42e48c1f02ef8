"""Simple slips a change writes: defects in the text that need no model and no data flow.

Each rule is a module of this package with its fixtures beside it (`fixtures/<rule>.py`: every line
marked `# slip` must be reported, every other line must not). A rule reads the whole syntax tree of
the file at head and says where the slip is; this module keeps only what the change wrote:

- the slip's lines must include a line the change added (a slip on untouched code is not this merge
  request's), and
- the same slip, in the same words, must not already be in the file at the base (rebuilt from the
  diff, `base_tree.reverse_patch`): a line re-indented or moved with its slip is old code.

The rules, each with what it does not catch in its own docstring:

- `slips:missing-comma` (`missing_comma`): two strings joined by a missing comma in a collection or
  an argument list;
- `slips:logging-args` (`logging_args`): a logging call whose arguments do not match its message's
  placeholders, for the stdlib's `%` style and loguru's `{}` style, decided by the module's imports;
- `slips:unraised-exception` (`unraised`): an exception built and dropped (`ValueError("x")` without
  `raise`);
- `slips:constant-comparison` (`constant_comparison`): a comparison whose result the text decides
  (`self.a == self.a`, `len(x) >= 0`, `x is None or x is not None`);
- `slips:mutated-default` (`mutated_default`): a mutable default argument the function mutates.

`is` with a literal is ruff's F632, which the code-quality reviewer already runs (right in 8 of 12
findings judged on held-out history, none wrong), so it is not repeated here.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from reviewers.analyzers.base_tree import reverse_patch
from reviewers.analyzers.changed_file import ChangedFile, Issue
from reviewers.analyzers.parsing import parse_module
from reviewers.analyzers.slips.constant_comparison import constant_comparison_issues
from reviewers.analyzers.slips.logging_args import logging_args_issues
from reviewers.analyzers.slips.missing_comma import missing_comma_issues
from reviewers.analyzers.slips.mutated_default import mutated_default_issues
from reviewers.analyzers.slips.unraised import unraised_issues

# a rule reads the module's nodes (one walk of the tree, shared: five walks cost more than the rules),
# the tree and its lines
SlipRule = Callable[[list[ast.AST], ast.Module, list[str]], list[Issue]]

SLIP_RULES: dict[str, SlipRule] = {
    "slips:missing-comma": missing_comma_issues,
    "slips:logging-args": logging_args_issues,
    "slips:unraised-exception": unraised_issues,
    "slips:constant-comparison": constant_comparison_issues,
    "slips:mutated-default": mutated_default_issues,
}


def all_slips(tree: ast.Module, lines: list[str]) -> list[Issue]:
    """Every rule's slips in a whole module, changed or not (the fixtures' and the base's view)."""
    nodes = list(ast.walk(tree))
    return [issue for rule in SLIP_RULES.values() for issue in rule(nodes, tree, lines)]


def _words(lines: list[str], issue: Issue) -> tuple[str, str]:
    end = max(issue.line, issue.end_line or issue.line)
    text = " ".join(" ".join(lines[n - 1].split()) for n in range(issue.line, end + 1) if 1 <= n <= len(lines))
    return issue.rule, text


def slip_issues(file: ChangedFile) -> list[Issue]:
    """The slips this change wrote in a Python file at head (none when the file does not parse)."""
    tree = file.python_tree
    if tree is None or not file.changed_lines:
        return []
    found = [i for i in all_slips(tree, file.lines) if file.touches(i.line, max(i.line, i.end_line or i.line))]
    if not found or file.change.status == "added" or not file.change.hunks:
        return found
    base_text = reverse_patch(file.text, file.change)
    base_tree = parse_module(base_text) if base_text is not None else None
    if base_tree is None or base_text is None:
        return found
    base_lines = base_text.splitlines()
    before = {_words(base_lines, i) for i in all_slips(base_tree, base_lines)}
    return [i for i in found if _words(file.lines, i) not in before]
