"""Paired statistics for the learning bench: per-MR differences, not separate per-stage intervals.

Every stage is evaluated on the same held-out merge requests, so what varies between two stages is
the per-MR difference, whose spread is far smaller than each stage's own (issue 24: per-MR sd
0.38–0.62 against paired sd 0.03–0.33). `paired_difference` gives the mean difference with a paired
bootstrap interval (MRs resampled together) and a two-sided sign-flip p (exact over all 2^n sign
patterns up to `EXACT_SIGN_FLIP_MAX_N` MRs, Monte Carlo beyond). `captured_share` is the share of the
oracle − rule headroom a stage captured. Pure functions, seeded: the same input gives the same output.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from reviewers.kernel.errors import ConfigError

EXACT_SIGN_FLIP_MAX_N = 16  # 65,536 patterns: exact and still instant
DEFAULT_RESAMPLES = 10_000
# Float noise in a sum of differences must not decide a tie between a flipped and the observed mean.
_TIE = 1e-12


@dataclass(frozen=True)
class PairedDifference:
    """mean(a − b) over MRs, its paired bootstrap interval [lo, hi] and the two-sided sign-flip p."""

    n: int
    mean: float
    lo: float
    hi: float
    p: float

    def as_dict(self) -> dict[str, float]:
        return {"n": self.n, "mean": self.mean, "lo": self.lo, "hi": self.hi, "p": self.p}


def differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    if len(a) != len(b):
        raise ConfigError(f"paired samples differ in length: {len(a)} and {len(b)} merge requests")
    if not a:
        raise ConfigError("paired samples are empty")
    return [x - y for x, y in zip(a, b, strict=True)]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    if not sorted_values:
        raise ConfigError("percentile of nothing")
    pos = q * (len(sorted_values) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low))


def bootstrap_interval(
    diffs: Sequence[float], *, level: float = 0.95, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean of `diffs`, MRs resampled with replacement."""
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    return percentile(means, tail), percentile(means, 1 - tail)


def sign_flip_p(diffs: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> float:
    """Two-sided p of mean(diffs) = 0 under random signs: the share of sign patterns whose |sum| is at
    least the observed |sum| (exact up to `EXACT_SIGN_FLIP_MAX_N`, else Monte Carlo with the observed
    pattern counted, so p is never 0)."""
    observed = abs(sum(diffs)) - _TIE
    if len(diffs) <= EXACT_SIGN_FLIP_MAX_N:
        patterns = itertools.product((1, -1), repeat=len(diffs))
        hits = sum(1 for signs in patterns if abs(sum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed)
        return hits / float(1 << len(diffs))
    rng = random.Random(seed)
    hits = sum(1 for _ in range(resamples) if abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed)
    return (hits + 1) / (resamples + 1)


def paired_difference(
    a: Sequence[float], b: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> PairedDifference:
    """a − b per MR: mean, paired bootstrap 95% interval, sign-flip p."""
    diffs = differences(a, b)
    lo, hi = bootstrap_interval(diffs, resamples=resamples, seed=seed)
    return PairedDifference(
        len(diffs), sum(diffs) / len(diffs), lo, hi, sign_flip_p(diffs, resamples=resamples, seed=seed)
    )


def captured_share(stage: float, rule: float, oracle: float) -> float | None:
    """(stage − rule) / (oracle − rule): 0 at the rule plan, 1 at the best plan per MR; None when there
    is no headroom to capture."""
    gap = oracle - rule
    return None if gap <= 0 else (stage - rule) / gap


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ConfigError("mean of nothing")
    return sum(values) / len(values)


def captured_share_interval(
    stage: Sequence[float],
    rule: Sequence[float],
    oracle: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """A paired bootstrap interval of the captured share: MRs resampled together, the share
    mean(stage − rule) / mean(oracle − rule) recomputed on each resample (resamples with no headroom
    left out). None when there is no headroom at all."""
    gains, gaps = differences(stage, rule), differences(oracle, rule)
    if len(gains) != len(gaps):
        raise ConfigError("stage, rule and oracle must cover the same merge requests")
    n = len(gains)
    if sum(gaps) <= 0:
        return None
    rng = random.Random(seed)
    shares = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        gap = sum(gaps[i] for i in picks)
        if gap > 0:
            shares.append(sum(gains[i] for i in picks) / gap)
    shares.sort()
    tail = (1 - level) / 2
    return percentile(shares, tail), percentile(shares, 1 - tail)
