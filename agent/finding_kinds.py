"""Kinds of finding: how a team's votes are keyed in the strategy prompt, in serving and in training.

The strategy model reads a team's votes in s1 ("team votes by kind"). Analyzers name a finding by its
rule id (`python:sql-interpolation`, `bandit:B608`, `ruff:E722`), several rules report one kind of
defect, and the learning environment's teams vote per kind (`learning.envgen`: sql-injection,
unsafe-yaml, ...). Serving keys a project's votes by the same kinds, so a model trained in that
environment reads the same line in production (issue 41); the environment's team profiles read a
posted finding's kind with the same function.

A finding's kind is read from its rule id and title (the rule alone cannot tell `yaml.load` from
`pickle.loads`: both are `python:unsafe-deserialization`). A finding of no known kind keeps its rule
id as its key: the votes on it are the team's taste all the same, and no environment plants it.
"""

from __future__ import annotations

# What each word of a finding's rule id or title says it reports, tried in this order (the first that
# occurs wins: "sql" before "token", so a SQL finding that mentions a token stays an injection).
KIND_BY_RULE_WORD: dict[str, str] = {
    "sql": "sql-injection", "B608": "sql-injection", "shell": "shell-injection", "B602": "shell-injection",
    "B605": "shell-injection", "yaml": "unsafe-yaml", "B506": "unsafe-yaml", "pickle": "unsafe-pickle",
    "B301": "unsafe-pickle", "deserial": "unsafe-pickle", "eval": "code-exec", "B307": "code-exec",
    "code-exec": "code-exec", "secret": "hardcoded-secret", "token": "hardcoded-secret", "B006": "mutable-default",
    "E722": "bare-except",
}  # fmt: skip

# The kinds of defect the mapping knows: the learning environment plants exactly these (a test holds
# `learning.envgen.plants.KINDS` to them).
DEFECT_KINDS: tuple[str, ...] = tuple(dict.fromkeys(KIND_BY_RULE_WORD.values()))


def finding_kind(*, rule: str, title: str) -> str | None:
    """The kind of defect a finding reports, read from its rule id and title (None: none known)."""
    text = f"{rule} {title}".lower()
    return next((kind for word, kind in KIND_BY_RULE_WORD.items() if word.lower() in text), None)


def vote_key(*, rule: str, title: str) -> str:
    """What a vote on this finding counts under in s1: its kind, else its rule id."""
    return finding_kind(rule=rule, title=title) or rule
