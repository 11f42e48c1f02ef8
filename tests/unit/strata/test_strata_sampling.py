"""Farthest-point sampling on 2-D vectors whose cosines are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.diversity import farthest_point_sample, mean_pairwise_distance
from reviewers.kernel.errors import TrainingError

R = 1 / math.sqrt(2)  # cos 45° ≈ 0.7071

# v0 = 0°, v1 = 45°, v2 = 90°, v3 = 180°, v4 = −45°. Pairwise cosines:
#        v0     v1     v2     v3     v4
#  v0    1      .707   0      -1     .707
#  v1    .707   1      .707   -.707  0
#  v2    0      .707   1      0      -.707
#  v3    -1     -.707  0      1      -.707
#  v4    .707   0      -.707  -.707  1
VECTORS = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [-1.0, 0.0], [1.0, -1.0]])


def test_fps_from_first_candidate_matches_hand_worked_order() -> None:
    # kept {0}: largest similarity to kept = v1 .707, v2 0, v3 -1, v4 .707 → smallest is v3.
    # kept {0,3}: v1 max(.707,-.707)=.707, v2 max(0,0)=0, v4 max(.707,-.707)=.707 → v2.
    assert farthest_point_sample(VECTORS, 3) == [0, 3, 2]
    # kept {0,3,2}: v1 max(.707,-.707,.707)=.707, v4 max(.707,-.707,-.707)=.707 → a tie, lower index v1.
    assert farthest_point_sample(VECTORS, 4) == [0, 3, 2, 1]


def test_fps_from_another_start() -> None:
    # kept {2}: v0 0, v1 .707, v3 0, v4 -.707 → v4.
    # kept {2,4}: v0 max(0,.707)=.707, v1 max(.707,0)=.707, v3 max(0,-.707)=0 → v3.
    assert farthest_point_sample(VECTORS, 3, first=2) == [2, 4, 3]


def test_fps_is_scale_invariant() -> None:
    scaled = VECTORS * np.array([[3.0], [0.1], [7.0], [1.0], [250.0]])
    assert farthest_point_sample(scaled, 4) == [0, 3, 2, 1]


def test_fps_ties_go_to_the_lower_index() -> None:
    same = np.ones((4, 3))
    assert farthest_point_sample(same, 3) == [0, 1, 2]


def test_fps_keeps_everything_when_n_reaches_k() -> None:
    # σ = 1: there are only N candidates, nothing is dropped.
    assert farthest_point_sample(VECTORS, 5) == [0, 1, 2, 3, 4]
    assert farthest_point_sample(VECTORS, 9, first=3) == [0, 1, 2, 3, 4]
    assert farthest_point_sample(VECTORS, 1, first=3) == [3]


@pytest.mark.parametrize(
    ("embeddings", "n", "first"),
    [
        (VECTORS, 0, 0),
        (VECTORS, 2, 5),
        (VECTORS, 2, -1),
        (np.zeros((0, 2)), 1, 0),
        (np.array([[1.0, 0.0], [0.0, 0.0]]), 1, 0),
        (np.array([1.0, 0.0]), 1, 0),
        (np.array([[np.nan, 1.0], [1.0, 0.0]]), 1, 0),
    ],
)
def test_fps_rejects_bad_input(embeddings: np.ndarray, n: int, first: int) -> None:
    with pytest.raises(TrainingError):
        farthest_point_sample(embeddings, n, first=first)


def test_mean_pairwise_distance_by_hand() -> None:
    # pairs of {v0, v2, v3}: (0,2) 1-0 = 1, (0,3) 1-(-1) = 2, (2,3) 1-0 = 1 → 4/3.
    assert mean_pairwise_distance(VECTORS, [0, 2, 3]) == pytest.approx(4 / 3)
    # {v0, v1}: 1 - .7071 = 0.2929.
    assert mean_pairwise_distance(VECTORS, [0, 1]) == pytest.approx(1 - R)
    assert mean_pairwise_distance(VECTORS, [4]) == 0.0
    with pytest.raises(TrainingError):
        mean_pairwise_distance(VECTORS, [])
    with pytest.raises(TrainingError):
        mean_pairwise_distance(VECTORS, [0, 5])


def test_fps_beats_every_other_triple_started_at_zero_on_this_set() -> None:
    # FPS is greedy, not optimal, but on this set its triple {0,3,2} has the largest spread of any
    # triple containing v0: (1 + 2 + 1)/3 = 4/3.
    best = max(mean_pairwise_distance(VECTORS, [0, a, b]) for a in range(1, 5) for b in range(a + 1, 5))
    assert mean_pairwise_distance(VECTORS, farthest_point_sample(VECTORS, 3)) == pytest.approx(best)
