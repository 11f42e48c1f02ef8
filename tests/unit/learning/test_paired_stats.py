"""Paired statistics of the learning bench, against values computed by hand."""

from __future__ import annotations

import pytest

from learning.paired_stats import (
    bootstrap_interval,
    captured_share,
    paired_difference,
    percentile,
    sign_flip_p,
)
from reviewers.kernel.errors import ConfigError


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.25) == pytest.approx(1.75)
    assert percentile([7.0], 0.975) == 7.0


def test_sign_flip_p_is_exact_for_few_merge_requests() -> None:
    # |1+2+3| = 6 is reached only by all plus and all minus: 2 of 8 sign patterns
    assert sign_flip_p([1.0, 2.0, 3.0]) == 0.25
    # a mean of zero: every pattern is at least as far from zero
    assert sign_flip_p([1.0, -1.0]) == 1.0
    # [3, 1]: |±3±1| >= 4 for ++ and -- only
    assert sign_flip_p([3.0, 1.0]) == 0.5


def test_sign_flip_p_by_sampling_counts_the_observed_pattern() -> None:
    # 20 equal differences: no random pattern of 1,000 reaches |20| (chance 2/2^20), so p = 1/1001
    assert sign_flip_p([1.0] * 20, resamples=1000) == pytest.approx(1 / 1001)


def test_bootstrap_interval_of_equal_differences_is_a_point_and_contains_the_mean() -> None:
    assert bootstrap_interval([0.5] * 9, resamples=200) == (0.5, 0.5)
    lo, hi = bootstrap_interval([2.0, 3.0, 1.0], resamples=2000)
    assert 1.0 <= lo < 2.0 < hi <= 3.0


def test_paired_difference_and_captured_share_by_hand() -> None:
    stage, rule = [3.0, 5.0, 4.0], [1.0, 2.0, 3.0]  # differences 2, 3, 1
    d = paired_difference(stage, rule, resamples=2000)
    assert (d.n, d.mean, d.p) == (3, 2.0, 0.25)
    assert paired_difference(stage, rule, resamples=2000) == d  # seeded
    assert captured_share(0.2, 0.0, 0.4) == pytest.approx(0.5)
    assert captured_share(0.0, 0.3, 0.3) is None
    with pytest.raises(ConfigError, match="differ in length"):
        paired_difference([1.0], [1.0, 2.0])
