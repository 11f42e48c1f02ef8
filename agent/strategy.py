"""The review strategy z: a compact plan written before any reviewer runs.

StraTA's first level: z ~ π(z | s1). z names the change type, the risky places, an ordered plan of
reviewers with focus paths and step budgets, and when to stop. It renders to about 200 tokens.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reviewers.contracts import PlanItem

ChangeType = Literal["feature", "bugfix", "refactor", "docs", "tests", "config", "dependency", "mixed"]
MAX_RISK_AREAS = 5
MAX_PLAN = 4


class RiskArea(BaseModel):
    model_config = ConfigDict(extra="ignore")
    path: str = Field(max_length=300)
    why: str = Field(max_length=200)


class Strategy(BaseModel):
    model_config = ConfigDict(extra="ignore")
    change_type: ChangeType
    risk_areas: list[RiskArea] = Field(default_factory=list, max_length=MAX_RISK_AREAS)
    plan: list[PlanItem] = Field(default_factory=list, max_length=MAX_PLAN)
    stop_condition: str = Field(default="all planned reviewers finished", max_length=200)

    @field_validator("plan")
    @classmethod
    def _one_item_per_reviewer(cls, plan: list[PlanItem]) -> list[PlanItem]:
        seen: set[str] = set()
        for item in plan:
            if item.reviewer in seen:
                raise ValueError(f"reviewer {item.reviewer} is planned twice")
            seen.add(item.reviewer)
        return plan

    def render(self) -> str:
        """The compact text form of z, as reviewers and the learning code see it."""
        lines = [f"change: {self.change_type}"]
        for r in self.risk_areas:
            lines.append(f"risk: {r.path} - {r.why}")
        for i, p in enumerate(self.plan, 1):
            focus = ", ".join(p.focus_paths) or "all changed files"
            lines.append(f"{i}. {p.reviewer} [{p.step_budget} steps] on {focus}: {p.checks}")
        if not self.plan:
            lines.append("no reviewers planned")
        lines.append(f"stop: {self.stop_condition}")
        return "\n".join(lines)

    def to_json(self) -> str:
        """The canonical JSON completion a model is trained to emit."""
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"), ensure_ascii=False)
