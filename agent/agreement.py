"""Agreement across diverse strategies: the precision signal that needs no labels.

A comment classifier trained on comment text predicted nothing here (ROC AUC ≈ 0.5); what predicted a
right comment was that an independent reviewer also raised it (on the Martian code-review benchmark's
judged tool comments, 51% right against 35% overall, keeping 87% of the right ones; SWR-Bench saw F1
rise by up to 43.7% from aggregating several reviews). So a review with a model runs its reviewers
under N strategies rather than one — the greedy strategy and the most different of several sampled
ones (farthest-point sampling over their embeddings, as StraTA's training does) — within the same
overall budget of model steps, and counts how many executions report each model-only finding:

- the same fingerprint, or the same path and line with close text (cosine of embeddings when an
  embedder is given, else the Jaccard overlap of word sets) is the same finding;
- a finding gets `Finding.agreement` (support, executions, required); the verifier
  (`agent.verifier.agreement_shortfall`) sends one with less support than required to a human
  (NEEDS_HUMAN_REVIEW, the count in the reason);
- analyzer findings are deterministic, so agreement says nothing about them: they are merged by
  fingerprint and left unannotated.

With one execution (no model, a strategy from the rules, N = 1, or no second distinct strategy)
nothing is annotated: that is the single-review behaviour.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent.shadow import plan_variations, sample_strategies
from agent.strategy import Strategy, constrain_strategy
from reviewers.kernel.contracts import Agreement, FileChange, Finding, LLMPort, RepoConfig

if TYPE_CHECKING:  # numpy and the embedders load only where strategies or findings are embedded
    import numpy as np

    from agent.embeddings import Embedder

log = logging.getLogger(__name__)

CANDIDATES_PER_STRATEGY = 2  # σ: sample twice as many strategies as are kept, so FPS has a choice
SAME_TEXT_COSINE = 0.8  # two findings on one line whose texts embed this close say the same thing
SAME_TEXT_JACCARD = 0.5  # the fallback without an embedder: half the words in common
_WORDS = re.compile(r"[a-z0-9_]+")


# --- choosing the strategies ----------------------------------------------------------------------


def diverse_strategies(
    base: Strategy,
    *,
    llm: LLMPort | None,
    s1: str,
    files: Sequence[FileChange],
    config: RepoConfig,
    n: int,
    embedder: Embedder | None = None,
) -> list[Strategy]:
    """`base` first, then up to n − 1 of the most different other strategies.

    Candidates are sampled from the model (σ·n of them, when its backend can sample), else or
    besides systematic variations of `base`; each is kept inside the change and the repository's
    config; duplicates go; farthest-point sampling over the embeddings of their rendered text keeps
    n, starting from `base`.
    """
    if n <= 1:
        return [base]
    sampled = sample_strategies(llm, s1, CANDIDATES_PER_STRATEGY * n) if llm is not None else []
    candidates = [base]
    seen = {base.to_json()}
    for z in sampled + plan_variations(base):
        z = constrain_strategy(z, files, config)
        if z.plan and z.to_json() not in seen:
            seen.add(z.to_json())
            candidates.append(z)
    if len(candidates) <= n:
        return candidates
    from agent.diversity import farthest_point_sample  # numpy: a review without a model never gets here
    from agent.embeddings import HashingEmbedder

    vectors = (embedder or HashingEmbedder()).embed([z.render() for z in candidates])
    return [candidates[i] for i in farthest_point_sample(vectors, n, first=0)]


def execution_step_budget(step_budget: int, executions: int) -> int:
    """A plan item's model steps in one of `executions`: the review's model budget is shared, not
    multiplied (at least one step each)."""
    return max(1, step_budget // max(1, executions))


# --- counting support ------------------------------------------------------------------------------


def _words(finding: Finding) -> set[str]:
    return set(_WORDS.findall(f"{finding.title} {finding.body}".lower()))


@dataclass
class _Cluster:
    finding: Finding  # the first report, from the earliest execution (the greedy strategy's first)
    executions: set[int] = field(default_factory=set)
    fingerprints: set[str] = field(default_factory=set)


def _text_matcher(findings: Sequence[Finding], embedder: Embedder | None) -> dict[int, np.ndarray] | None:
    if embedder is None or not findings:
        return None
    rows = embedder.embed([f"{f.title}\n{f.body}" for f in findings])
    return {id(f): rows[i] for i, f in enumerate(findings)}


def annotate_support(
    executions: Sequence[Sequence[Finding]], *, min_support: int, embedder: Embedder | None = None
) -> list[Finding]:
    """The findings of all executions, one per problem, model-only ones annotated with their support.

    `executions[0]` is the greedy strategy's; a problem several executions report keeps the earliest
    report. With fewer than two executions the findings pass through (deduplicated) unannotated.
    """
    total = len(executions)
    analyzer: dict[str, Finding] = {}
    model: list[tuple[int, Finding]] = []
    for index, findings in enumerate(executions):
        for f in findings:
            if f.rule == "llm":
                model.append((index, f))
            else:
                analyzer.setdefault(f.fingerprint, f)
    vectors = _text_matcher([f for _, f in model], embedder)
    clusters: list[_Cluster] = []
    for index, f in model:
        home = next((c for c in clusters if _same_problem(c, f, vectors)), None)
        if home is None:
            home = _Cluster(f)
            clusters.append(home)
        home.executions.add(index)
        home.fingerprints.add(f.fingerprint)
    out = list(analyzer.values())
    required = min(min_support, total)
    for c in clusters:
        if total < 2:
            out.append(c.finding)
            continue
        agreement = Agreement(support=len(c.executions), executions=total, required=required)
        out.append(c.finding.model_copy(update={"agreement": agreement}))
    return out


def _same_problem(cluster: _Cluster, finding: Finding, vectors: dict[int, np.ndarray] | None) -> bool:
    if finding.fingerprint in cluster.fingerprints:
        return True
    first = cluster.finding
    if (first.path, first.line) != (finding.path, finding.line):
        return False
    if vectors is not None:
        return float(vectors[id(first)] @ vectors[id(finding)]) >= SAME_TEXT_COSINE
    a, b = _words(first), _words(finding)
    return bool(a | b) and len(a & b) / len(a | b) >= SAME_TEXT_JACCARD
