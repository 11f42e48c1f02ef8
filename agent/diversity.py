"""Farthest-point sampling of strategy candidates: the most different ones, by their embeddings.

Two users, one function. StraTA's training (`learning.strata`) samples σ·N strategy candidates per
merge request and keeps N: diverse strategies give the strategy-level advantage something to tell
apart; near-duplicates waste M executions each. A review with a model (`agent.agreement`) keeps the N
most different strategies it sampled, so that findings they agree on come from independent looks.
Greedy: add the candidate whose largest cosine similarity to those already kept is smallest. With
σ = 1 there are only N candidates and nothing is dropped. It lives in `agent/` because layers import
downwards: the review runtime cannot import `learning/`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from reviewers.kernel.errors import TrainingError

# A row shorter than this cannot be given a direction; cosine similarity is undefined for it.
MIN_ROW_NORM = 1e-12


def _unit_rows(embeddings: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The rows scaled to unit length, after checking the array is a non-empty (K, d) matrix."""
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise TrainingError(f"embeddings must be a non-empty (K, d) matrix, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise TrainingError("embeddings contain NaN or infinite values")
    norms = np.linalg.norm(x, axis=1)
    zero = np.flatnonzero(norms < MIN_ROW_NORM)
    if zero.size:
        raise TrainingError(f"embedding rows {zero.tolist()} have zero length; cosine similarity is undefined")
    unit: npt.NDArray[np.float64] = x / norms[:, None]
    return unit


def farthest_point_sample(embeddings: npt.ArrayLike, n: int, *, first: int = 0) -> list[int]:
    """Indices of `n` candidates chosen greedily for spread, in the order they were chosen.

    Starts from `first` (the trainer passes the candidate it trusts most, e.g. the first sample), then
    repeatedly adds the candidate whose largest cosine similarity to the kept set is smallest. Ties go
    to the lower index, so the result is deterministic. When `n >= K` every index is returned, in
    order 0..K-1: there is nothing to choose (σ = 1).
    """
    unit = _unit_rows(embeddings)
    k = unit.shape[0]
    if n < 1:
        raise TrainingError(f"cannot keep {n} strategies; n must be at least 1")
    if not 0 <= first < k:
        raise TrainingError(f"first={first} is not a candidate index (there are {k} candidates)")
    if n >= k:
        return list(range(k))
    similarity = unit @ unit.T
    kept = [first]
    # nearest[i]: the largest similarity of candidate i to anything kept so far.
    nearest = similarity[first].copy()
    chosen = np.zeros(k, dtype=bool)
    chosen[first] = True
    while len(kept) < n:
        # Chosen candidates can never be picked again; np.argmin returns the lowest index on ties.
        nxt = int(np.argmin(np.where(chosen, np.inf, nearest)))
        kept.append(nxt)
        chosen[nxt] = True
        nearest = np.maximum(nearest, similarity[nxt])
    return kept


def mean_pairwise_distance(embeddings: npt.ArrayLike, idx: Sequence[int]) -> float:
    """Mean cosine distance (1 − cosine similarity) over all unordered pairs of the chosen rows.

    One chosen row has no pairs; its spread is 0.
    """
    unit = _unit_rows(embeddings)
    chosen = list(idx)
    if not chosen:
        raise TrainingError("mean_pairwise_distance needs at least one index")
    k = unit.shape[0]
    bad = [i for i in chosen if not 0 <= i < k]
    if bad:
        raise TrainingError(f"indices {bad} are out of range for {k} candidates")
    if len(chosen) == 1:
        return 0.0
    sub = unit[chosen]
    sim = sub @ sub.T
    upper = np.triu_indices(len(chosen), k=1)
    return float(np.mean(1.0 - sim[upper]))
