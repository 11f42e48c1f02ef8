"""Shadow strategies: alternative plans for the same merge request, executed but never posted.

Preference learning needs two strategies for the same MR whose outcomes differ. After the review
that is posted, N other strategies are run on the same snapshot (sampled from the strategy model
when it can sample, else systematic variations of the plan in service); their findings are stored
as shadow reviews, and the dataset builder gives them the labels people gave the posted findings
they match. Shadow runs are best effort: a failure is logged and never affects the real review.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from pydantic import ValidationError

from agent.diff import DiffIndex
from agent.llm.structured import InvalidOutput, extract_json
from agent.store import reviews as store_reviews
from agent.store.db import Database
from agent.store.reviews import StrategySource
from agent.strategy import Strategy, constrain_strategy, strategy_messages
from agent.strategy_schema import strategy_json_schema
from agent.verifier import Verdict, VerifierInputs, verify_findings
from reviewers import run_reviewer
from reviewers.kernel.contracts import FileChange, Finding, LLMPort, RepoConfig, ReviewContext
from reviewers.kernel.errors import LLMError

log = logging.getLogger(__name__)
SHADOW_TEMPERATURE = 1.0  # shadows exist to differ from the greedy plan


class ShadowCandidate(NamedTuple):
    """A shadow strategy and where it came from: sampled from the model (`model`), or a systematic
    variation of the plan in service (`rule`: a fixed rule wrote it, whoever wrote the plan it varies)."""

    strategy: Strategy
    source: StrategySource


def plan_variations(base: Strategy) -> list[Strategy]:
    """Deterministic alternatives to a plan: each reviewer alone, focus reversed, budgets halved."""
    out: list[Strategy] = []
    for item in base.plan:
        out.append(base.model_copy(update={"plan": [item]}))
    if base.plan:
        out.append(
            base.model_copy(
                update={"plan": [p.model_copy(update={"focus_paths": p.focus_paths[::-1]}) for p in base.plan]}
            )
        )
        out.append(
            base.model_copy(
                update={"plan": [p.model_copy(update={"step_budget": max(1, p.step_budget // 2)}) for p in base.plan]}
            )
        )
    return out


def sample_strategies(llm: LLMPort, s1: str, n: int, *, json_schema: Mapping[str, Any] | None = None) -> list[Strategy]:
    """n strategies sampled from the model (when its backend can sample); invalid samples are skipped.

    `json_schema` (`strategy_json_schema` of the merge request) constrains each sample's decoding.
    """
    sampler = getattr(llm, "sample_texts", None)
    if sampler is None:
        return []
    try:
        texts: list[str] = sampler(
            strategy_messages(s1),
            n=n,
            temperature=SHADOW_TEMPERATURE,
            max_tokens=512,
            purpose="shadow",
            json_schema=json_schema,
        )
    except LLMError as exc:
        log.warning("shadow sampling failed: %s", exc)
        return []
    out = []
    for text in texts:
        try:
            out.append(Strategy.model_validate(extract_json(text)))
        except (InvalidOutput, ValueError, ValidationError):  # InvalidOutput: no JSON in the sample at all
            continue
    return out


def shadow_candidates(
    base: Strategy, files: Sequence[FileChange], config: RepoConfig, *, n: int, llm: LLMPort | None, s1: str
) -> list[ShadowCandidate]:
    """Up to n strategies different from `base` (and from each other), model samples first."""
    seen = {base.to_json()}
    out: list[ShadowCandidate] = []
    schema = strategy_json_schema([f.path for f in files], reviewers=config.reviewers)
    sampled = sample_strategies(llm, s1, n, json_schema=schema) if llm is not None else []
    pool = [ShadowCandidate(z, "model") for z in sampled] + [ShadowCandidate(z, "rule") for z in plan_variations(base)]
    for z, source in pool:
        z = constrain_strategy(z, files, config)
        key = z.to_json()
        if key not in seen:
            seen.add(key)
            out.append(ShadowCandidate(z, source))
        if len(out) >= n:
            break
    return out


def execute_strategy(
    z: Strategy, context: ReviewContext, inputs: VerifierInputs, llm: LLMPort | None
) -> list[tuple[Finding, Verdict, str]]:
    """Run z's reviewers (concurrently) and the verifier; nothing is posted."""
    if not z.plan:
        return []
    with ThreadPoolExecutor(max_workers=len(z.plan)) as pool:
        results = list(pool.map(lambda item: run_reviewer(item.reviewer, context, item, llm), z.plan))
    findings = [f for r in results for f in r.findings]
    return [(v.finding, v.verdict, v.reason) for v in verify_findings(findings, inputs, None)]


def run_shadow_reviews(
    db: Database,
    *,
    parent_review_id: int,
    base: Strategy,
    context: ReviewContext,
    diff_index: DiffIndex,
    n: int,
    llm: LLMPort | None,
    s1: str,
    source: str,
) -> list[int]:
    """Store n shadow reviews of the parent's snapshot; returns their ids."""
    ids: list[int] = []
    inputs = VerifierInputs(
        workspace=context.workspace, diff_index=diff_index, min_severity=context.config.min_severity
    )
    for z, strategy_source in shadow_candidates(base, context.files, context.config, n=n, llm=llm, s1=s1):
        try:
            verified = execute_strategy(z, context, inputs, None)
            review_id = store_reviews.create_review(
                db,
                source=source,  # type: ignore[arg-type]
                project=context.project or "",
                mr_iid=context.mr_iid,
                title=context.title,
                head_sha=context.head_sha,
                is_shadow=True,
                parent_review_id=parent_review_id,
            )
            store_reviews.set_strategy(
                db,
                review_id,
                strategy_json=z.model_dump(mode="json"),
                strategy_text=z.render(),
                strategy_source=strategy_source,
            )
            store_reviews.save_findings(db, review_id, verified)
            store_reviews.mark_done(db, review_id, stats={"shadow": True}, cost_tokens=0)
            ids.append(review_id)
        except Exception:  # a shadow must never break the real review
            log.exception("shadow review of review %s failed", parent_review_id)
    return ids
