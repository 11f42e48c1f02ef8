"""Token masks and advantages for rollouts laid out as segments."""

from __future__ import annotations

import numpy as np
import pytest

from learning.strata.masking import Segment, TokenTargets, build_token_targets, stack_token_targets
from reviewers.kernel.errors import TrainingError

# prompt 3 | strategy 2 | step 0: action 2, tool 3 | step 1: action 1, env 2   → 13 tokens
LAYOUT: list[Segment] = [
    ("prompt", 3, None),
    ("strategy", 2, None),
    ("action", 2, 0),
    ("tool", 3, 0),
    ("action", 1, 1),
    ("env", 2, 1),
]


def test_first_execution_carries_strategy_and_action_advantages() -> None:
    t = build_token_targets(
        LAYOUT, execution_index=0, strategy_advantage=1.5, execution_advantage=-0.5, flagged_steps={1}, kappa=0.1
    )
    assert t.mask.tolist() == [0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0]
    # step 1 was flagged: its single action token gets -0.5 - 0.1 = -0.6
    assert t.advantages.tolist() == pytest.approx([0, 0, 0, 1.5, 1.5, -0.5, -0.5, 0, 0, 0, -0.6, 0, 0])
    assert len(t) == 13


def test_later_executions_leave_the_strategy_out_so_it_counts_once() -> None:
    t = build_token_targets(LAYOUT, execution_index=3, strategy_advantage=1.5, execution_advantage=0.25)
    assert t.mask.tolist() == [0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0]
    assert t.advantages.tolist() == pytest.approx([0, 0, 0, 0, 0, 0.25, 0.25, 0, 0, 0, 0.25, 0, 0])
    # over M = 4 executions the strategy's 2 tokens are in the loss exactly 2 times, not 8
    rollouts = [
        build_token_targets(LAYOUT, execution_index=j, strategy_advantage=1.0, execution_advantage=0.0)
        for j in range(4)
    ]
    assert sum(float(r.mask[3:5].sum()) for r in rollouts) == 2.0


def test_fixed_executor_layout_is_prompt_and_strategy_only() -> None:
    t = build_token_targets(
        [("prompt", 2, None), ("strategy", 3, None)],
        execution_index=0,
        strategy_advantage=-0.8,
        execution_advantage=0.0,
    )
    assert t.mask.tolist() == [0, 0, 1, 1, 1]
    assert t.advantages.tolist() == pytest.approx([0, 0, -0.8, -0.8, -0.8])


def test_a_flagged_step_only_penalises_its_action_tokens() -> None:
    t = build_token_targets(
        LAYOUT, execution_index=1, strategy_advantage=0.0, execution_advantage=0.0, flagged_steps={0}, kappa=0.1
    )
    # step 0's tool tokens stay masked with advantage 0
    assert t.advantages.tolist() == pytest.approx([0, 0, 0, 0, 0, -0.1, -0.1, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize(
    ("segments", "flagged", "message"),
    [
        ([("action", 2, None)], set(), "needs its step index"),
        ([("prompt", -1, None)], set(), "negative"),
        ([("strategy", 2, 0)], set(), "belongs to no step"),
        ([("reward", 2, None)], set(), "unknown kind"),
        ([("action", 2, 0)], {5}, "no tokens"),
        ([("action", 2, 0), ("tool", 1, 5)], {5}, "no tokens"),  # only action tokens can be penalised
    ],
)
def test_bad_layouts_are_errors(segments: list[Segment], flagged: set[int], message: str) -> None:
    with pytest.raises(TrainingError, match=message):
        build_token_targets(
            segments, execution_index=0, strategy_advantage=0.0, execution_advantage=0.0, flagged_steps=flagged
        )


def _targets(mask: list[float], adv: list[float]) -> TokenTargets:
    return TokenTargets(mask=np.array(mask, dtype=np.float32), advantages=np.array(adv, dtype=np.float32))


def test_stack_pads_with_masked_zeros() -> None:
    a = _targets([0, 1, 1], [0, 2, 2])
    b = _targets([1], [-1])
    mask, adv = stack_token_targets([a, b])
    assert mask.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert adv.tolist() == [[0, 2, 2], [-1, 0, 0]]
    mask, adv = stack_token_targets([a, b], length=4, pad_side="left")
    assert mask.tolist() == [[0, 0, 1, 1], [0, 0, 0, 1]]
    assert adv.tolist() == [[0, 0, 2, 2], [0, 0, 0, -1]]
    with pytest.raises(TrainingError, match="more than the padded length"):
        stack_token_targets([a], length=2)
    with pytest.raises(TrainingError):
        stack_token_targets([])
