"""The non-LM reference (issue 41): a ridge regression on s1 that predicts each visit's value.

The audit's point was that the information a plan needs is in the prompt: a linear model over s1's
tokens, fit on the training MRs' exact visit values (`learning.headroom.case_table`), already beats the
best fixed rule. This is that model, as a row beside every trained stage. Per (reviewer, file) visit
the features are the reviewer crossed with the tokens of that file's added lines in s1, with the team's
votes by kind (liked / disliked), and with each (vote, token) pair — so "a bare `except:` in a file the
team votes down bare-except" is one weight. The plan is the oracle's search over the predicted values
(`oracle_visits`: the mandatory reviewer's best files, then another reviewer's positive ones), scored
by the true values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from learning.headroom import ZERO, CaseTable, Outcome, Visit, oracle_visits

FILE_HEADER = re.compile(r"^(?:modified|added|deleted|renamed) (\S+) \[")
VOTES = re.compile(r"^team votes by kind \(up/down\): (.*)$")
VOTE = re.compile(r"([\w-]+) \+(\d+)/-(\d+)")
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[^\sA-Za-z0-9_]")


def file_blocks(s1: str) -> dict[str, list[str]]:
    """Each changed file's added lines as s1 shows them."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in s1.splitlines():
        header = FILE_HEADER.match(line)
        if header:
            current = blocks.setdefault(header.group(1), [])
        elif line.startswith(">>>"):
            current = None
        elif current is not None:
            current.append(line.split(": ", 1)[-1].removeprefix("+"))
    return blocks


def team_votes(s1: str) -> dict[str, int]:
    """The team's net vote per defect kind (up − down), from s1's votes line."""
    for line in s1.splitlines():
        found = VOTES.match(line)
        if found:
            return {k: int(up) - int(down) for k, up, down in VOTE.findall(found.group(1))}
    return {}


def visit_features(reviewer: str, lines: Sequence[str], votes: dict[str, int]) -> list[str]:
    tokens = sorted({t for line in lines for t in TOKEN.findall(line)})
    leaning = [f"{'like' if v > 0 else 'dislike'}={k}" for k, v in votes.items() if v != 0]
    out = [f"r={reviewer}", f"r={reviewer}|lines={min(len(lines), 12)}"]
    out += [f"r={reviewer}|t={t}" for t in tokens]
    out += [f"r={reviewer}|{lean}" for lean in leaning]
    out += [f"r={reviewer}|{lean}|t={t}" for lean in leaning for t in tokens]
    return out


@dataclass
class RidgePolicy:
    """Per-visit value regression on hashed s1 features."""

    alpha: float = 1.0
    n_features: int = 1 << 20
    model: Any = None

    def _rows(self, s1: str, visits: Sequence[Visit]) -> list[list[str]]:
        blocks, votes = file_blocks(s1), team_votes(s1)
        return [visit_features(r, blocks.get(p, []), votes) for r, p in visits]

    def _matrix(self, rows: list[list[str]]) -> Any:
        from sklearn.feature_extraction import FeatureHasher

        return FeatureHasher(n_features=self.n_features, input_type="string", alternate_sign=False).transform(rows)

    def fit(self, examples: Sequence[tuple[str, CaseTable]]) -> RidgePolicy:
        from sklearn.linear_model import Ridge

        rows: list[list[str]] = []
        targets: list[float] = []
        for s1, table in examples:
            visits = list(table.values)
            rows += self._rows(s1, visits)
            targets += [table.values[v].reward for v in visits]
        self.model = Ridge(alpha=self.alpha).fit(self._matrix(rows), targets)
        return self

    def predicted(self, s1: str, table: CaseTable) -> CaseTable:
        """`table` with each visit's value replaced by the prediction (floor zero: it is the same for
        every plan)."""
        visits = list(table.values)
        if not visits:
            return replace(table, values={}, floor=ZERO)
        guesses = self.model.predict(self._matrix(self._rows(s1, visits)))
        values = {v: Outcome(float(g), 0.0, 0.0, 0.0, 0.0, 0) for v, g in zip(visits, guesses, strict=True)}
        return replace(table, values=values, floor=ZERO)

    def plan(self, s1: str, table: CaseTable) -> list[Visit]:
        return oracle_visits(self.predicted(s1, table))
