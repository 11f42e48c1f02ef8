"""Bodies of the feedback and read API (requests and responses), as pydantic models."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.context import NotReviewed

Verdict = Literal["REAL", "FALSE_POSITIVE", "DUPLICATE", "NEEDS_HUMAN_REVIEW"]


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: Literal[-1, 1]
    comment: str | None = Field(default=None, max_length=10_000)
    user: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="who the token says voted: recorded beside the vote; the token stays one voter",
    )

    @field_validator("value", mode="before")
    @classmethod
    def integer_vote(cls, value: object) -> object:
        """-1 or 1 as JSON integers: `true` or `1.0` would pass the Literal (True == 1) and mean nothing."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be the integer -1 or 1")
        return value

    @field_validator("comment", "user")
    @classmethod
    def storable(cls, text: str | None) -> str | None:
        """Postgres text cannot hold a NUL character: say so here (422), not in a failed insert."""
        if text is not None and "\x00" in text:
            raise ValueError("must not contain NUL characters")
        return text


class FeedbackOut(BaseModel):
    finding_id: int
    user_key: str  # the voter: 'gitlab:<user id>' or 'token:<API token name>'
    claimed_user: str | None = None  # the `user` an API token named: recorded, not an identity
    source: str
    value: int
    comment: str | None
    created_at: datetime
    updated_at: datetime


class FindingOut(BaseModel):
    id: int
    fingerprint: str
    path: str
    line: int
    end_line: int
    category: str
    severity: str
    title: str
    body: str
    evidence: str
    reviewer: str
    rule: str
    verdict: Verdict
    verdict_reason: str
    discussion_id: str | None
    note_id: int | None
    position_fallback: bool
    posted_at: datetime | None
    thread_state: str | None
    feedback: list[FeedbackOut] = Field(default_factory=list)


class ReviewSummary(BaseModel):
    id: int
    source: str
    project: str
    mr_iid: int | None
    title: str
    head_sha: str | None
    status: str
    strategy_source: str | None
    is_shadow: bool
    cost_tokens: int
    created_at: datetime
    finished_at: datetime | None
    findings: int
    findings_real: int


class ReviewDetail(BaseModel):
    id: int
    source: str
    project: str
    mr_iid: int | None
    title: str
    base_sha: str | None
    start_sha: str | None
    head_sha: str | None
    previous_head_sha: str | None
    status: str
    error: str | None
    strategy: dict[str, Any] | None
    strategy_text: str | None
    strategy_source: str | None
    is_shadow: bool
    not_reviewed: list[NotReviewed]  # every changed file not analyzed in full, with its reason
    stats: dict[str, Any]
    cost_tokens: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    findings: list[FindingOut]


class ReviewPage(BaseModel):
    items: list[ReviewSummary]
    total: int
    limit: int
    offset: int
