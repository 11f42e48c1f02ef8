"""A team profile: what one team accepts and rejects when a review posts on its merge requests.

Teams differ: one wants every injection pointed out but is tired of comments on its vendored code;
another rejects code-quality remarks altogether. The profile is the environment's stand-in for such a
team. It decides the labels of the planted defects (a defect the team would reject is labeled
rejected: posting it costs reward) and it votes on what a review actually posts, so the votes can go
through the real feedback → dataset path. A profile is seeded (the same seed, the same team) or read
from a JSON file; a file naming an unknown category or kind is refused with one line.
"""

from __future__ import annotations

import fnmatch
import json
import random
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.finding_kinds import finding_kind
from learning.envgen.plants import DEFECTS, KINDS
from reviewers.kernel.contracts import CATEGORIES, Finding
from reviewers.kernel.errors import InputError

_CATEGORY_OF_KIND = {t.kind: t.category for t in DEFECTS}
Vote = Literal["accepted", "rejected"]
# Paths a team commonly asks reviews to leave alone (generated, vendored, compatibility shims).
_PATH_HABITS = ("*/compat*", "*/_vendor/*", "*/tests/*", "*/testing/*", "*/_internal/*", "*/utils/*")


class TeamProfile(BaseModel):
    """What the team accepts (`accept_categories`) and rejects (categories, kinds, path patterns)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "team"
    accept_categories: list[str] = Field(default_factory=lambda: ["security", "code_quality"])
    reject_categories: list[str] = Field(default_factory=list)
    reject_kinds: list[str] = Field(default_factory=list)
    reject_paths: list[str] = Field(default_factory=list, description="fnmatch patterns of paths not to comment on")

    @field_validator("accept_categories", "reject_categories")
    @classmethod
    def _known_categories(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(CATEGORIES))
        if unknown:
            raise ValueError(f"unknown categories {', '.join(unknown)} (known: {', '.join(CATEGORIES)})")
        return value

    @field_validator("reject_kinds")
    @classmethod
    def _known_kinds(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown kinds {', '.join(unknown)} (known: {', '.join(KINDS)})")
        return value

    def vote(self, *, path: str, category: str, kind: str | None) -> Vote | None:
        """The team's vote on a comment: rejected by any reject rule, accepted by its category, else none."""
        if category in self.reject_categories or (kind is not None and kind in self.reject_kinds):
            return "rejected"
        if any(fnmatch.fnmatch(path, pattern) for pattern in self.reject_paths):
            return "rejected"
        return "accepted" if category in self.accept_categories else None

    def vote_on(self, finding: Finding) -> Vote | None:
        return self.vote(
            path=finding.path, category=finding.category, kind=finding_kind(rule=finding.rule, title=finding.title)
        )

    def past_votes(self, paths: list[str], rng: random.Random) -> tuple[dict[str, float], dict[str, tuple[int, int]]]:
        """The team's earlier votes as serving shows a project's history in s1: the accepted share of
        past comments on the changed paths its habits reject (0%), and people up/down per kind of
        finding (every kind: those the team rejects mostly down, the rest mostly up). Counts are drawn
        from `rng`, so two merge requests of one team show the same taste with different numbers."""
        history = {p: 0.0 for p in paths if any(fnmatch.fnmatch(p, pat) for pat in self.reject_paths)}
        votes: dict[str, tuple[int, int]] = {}
        for kind in KINDS:
            category = _CATEGORY_OF_KIND[kind]
            if self.vote(path="", category=category, kind=kind) == "rejected":
                votes[kind] = (rng.randint(0, 1), rng.randint(3, 6))
            else:
                votes[kind] = (rng.randint(2, 6), rng.randint(0, 1))
        return history, votes

    @classmethod
    def sample(cls, seed: int) -> TeamProfile:
        """A seeded team: always wants security; may reject code quality, one kind, and a path habit."""
        rng = random.Random(seed)
        reject_categories = ["code_quality"] if rng.random() < 0.3 else []
        accept = ["security"] + ([] if reject_categories else ["code_quality"])
        return cls(
            name=f"team-{seed}",
            accept_categories=accept,
            reject_categories=reject_categories,
            reject_kinds=rng.sample([k for k in KINDS if k not in ("sql-injection", "shell-injection")], 1),
            reject_paths=rng.sample(_PATH_HABITS, rng.randint(0, 2)),
        )


def load_profile(path: Path) -> TeamProfile:
    """A profile from a JSON file; anything wrong is one InputError line."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read profile {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise InputError(f"profile {path} is not JSON: {exc}") from exc
    try:
        return TeamProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise InputError(f"profile {path}: {where}: {first['msg'].removeprefix('Value error, ')}") from exc
