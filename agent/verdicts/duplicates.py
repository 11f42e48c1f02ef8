"""One root cause, one finding: the same problem reported by two analyzers.

bandit, ruff's flake8-bandit rules, our own syntax-tree checks and a model can all see the SQL
text built with an f-string on line 12. Each reviewer already folds its own analyzers' reports; across
reviewers the verifier does it. Two findings are one problem when they are on the same path, their
lines overlap, and their categories are compatible: both rules belong to the same family of
problem, or, when one of them is a model's finding (no family), they share a category.
The strongest report stays REAL and names the others; the others are DUPLICATE.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from reviewers.kernel.contracts import SEVERITY_RANK, Finding

# Rule id → family of problem. bandit's and ruff's ids (ruff's S-rules are bandit's ported, with
# the same numbers) sit beside our own rule names for the same problem.
_FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sql", re.compile(r"sql|:[BS]608$")),
    ("shell", re.compile(r"shell|command-injection|:[BS]60[1245]$|:[BS]609$")),
    ("code-exec", re.compile(r"code-eval|code-exec|:[BS]102$|:[BS]307$")),
    ("deserialization", re.compile(r"deserial|pickle|:[BS]30[12]$|:[BS]506$|:[BS]614$")),
    ("tls-verify", re.compile(r"tls|:[BS]50[1-4]$|:[BS]323$")),
    ("swallowed-error", re.compile(r"empty-catch|swallow|:[BS]11[02]$|:E722$|:BLE001$")),
    ("secret", re.compile(r"^secrets:|:[BS]10[5-7]$")),
    ("path-traversal", re.compile(r"traversal")),
)
CONFIDENCE_RANK = {"low": 0, "medium": 1, "high": 2}
MODEL_RULES = frozenset({"", "llm"})


def family_of(rule: str) -> str | None:
    """The family of problem a rule reports, or None when it is not known here."""
    for family, pattern in _FAMILIES:
        if pattern.search(rule):
            return family
    return None


# A model's finding has no rule id; its title names the kind of injection it claims.
_MODEL_SINK_CLAIMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sql", re.compile(r"\bsql\b|\bquery\b", re.IGNORECASE)),
    ("shell", re.compile(r"\bshell\b|\bcommand injection\b|\bsubprocess\b", re.IGNORECASE)),
    ("code-exec", re.compile(r"\beval\b|\bexec\b", re.IGNORECASE)),
)


def claimed_family(finding: Finding) -> str | None:
    """The family a finding claims: its rule's, or for a model's finding the one its title names."""
    if finding.rule not in MODEL_RULES:
        return family_of(finding.rule)
    for family, pattern in _MODEL_SINK_CLAIMS:
        if pattern.search(finding.title):
            return family
    return None


def same_root_cause(a: Finding, b: Finding) -> bool:
    """Whether two findings report one problem: same path, overlapping lines, compatible kinds."""
    if a.path != b.path or a.line > max(b.line, b.end_line) or b.line > max(a.line, a.end_line):
        return False
    fa, fb = family_of(a.rule), family_of(b.rule)
    if fa is not None and fb is not None:
        return fa == fb
    if a.rule not in MODEL_RULES and b.rule not in MODEL_RULES:
        return a.rule == b.rule  # two analyzers' different rules of no known family: two problems
    return a.category == b.category


def strength(finding: Finding) -> tuple[int, int, int]:
    """Which of two reports of one problem to keep: the more severe, the more confident, and an
    analyzer's (whose evidence is mechanical) before a model's."""
    return (
        SEVERITY_RANK[finding.severity],
        CONFIDENCE_RANK[finding.confidence],
        0 if finding.rule in MODEL_RULES else 1,
    )


def group_root_causes(findings: Sequence[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """Each lead finding with the reports of the same root cause folded into it, strongest first.
    A finding joins the first group whose lead shares its root cause."""
    groups: list[tuple[Finding, list[Finding]]] = []
    for finding in sorted(findings, key=strength, reverse=True):
        for lead, others in groups:
            if same_root_cause(lead, finding):
                others.append(finding)
                break
        else:
            groups.append((finding, []))
    return groups


def rule_name(finding: Finding) -> str:
    return finding.rule or f"the {finding.reviewer} reviewer's model"
