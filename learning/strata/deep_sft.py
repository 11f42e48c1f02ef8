"""SFT and DPO on the decisions, with an adapter on the last K layers that re-reads the prompt (issue 41).

Each training MR's prompt is read once through the frozen layers (`DeepPromptCache`: their keys and
values and the hidden states entering the first adapted layer); a step runs only the adapted layers,
over the prompt (so their keys and values — and so what the model reads of the prompt — train) and over
the MR's target plans, batched against one prompt pass. The loss is on the decisions only: at each
position where the grammar leaves a choice (`decision_targets.replay`), the log-probability of the
target token renormalised over the allowed tokens, which is the log-probability of the decision the
constrained decoder makes; the head is applied to those positions and those tokens only.

- `sft_loss`: the mean decision negative log-likelihood of an MR's good plans (several per MR,
  `learning.visit_targets.good_plans`);
- `dpo_loss`: DPO on (good, worse) plans of the same MR, with decision log-probabilities summed per
  plan and the reference taken from the policy before DPO (kept as numbers, read once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from learning.strata.policy import _decoder_stack, _only_layers

if TYPE_CHECKING:
    import torch

    from learning.strata.policy import StrategyPolicy


@dataclass
class ReadTarget:
    """A plan as the decoder writes it, with what the frozen layers hand up over it."""

    tokens: list[int]
    decisions: list[int]
    allowed: list[list[int]]
    hidden: torch.Tensor  # (C, hidden): the input of the first adapted layer over [prompt[-1], *tokens[:-1]]
    value: float = 0.0


@dataclass
class ReadCase:
    """One MR's prompt as the frozen layers read it, and its target plans."""

    case_id: str
    prompt: list[int]
    hidden: torch.Tensor  # (P-1, hidden): the input of the first adapted layer over prompt[:-1]
    good: list[ReadTarget] = field(default_factory=list)
    bad: list[ReadTarget] = field(default_factory=list)


def _stack_run(policy: StrategyPolicy, first: int, inputs: torch.Tensor, cache: Any) -> torch.Tensor:
    """The adapted layers (and the final norm) over `inputs`, after what `cache` holds."""
    stack = _decoder_stack(policy.model)
    with _only_layers(stack, slice(first, None)):
        out = stack(inputs_embeds=inputs, cache=cache, use_cache=True)
    hidden: torch.Tensor = out.last_hidden_state
    return hidden


def prompt_keys_values(policy: StrategyPolicy, first: int, case: ReadCase) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The adapted layers' keys and values over the prompt (with gradients when enabled)."""
    from transformers import DynamicCache

    dtype = next(policy.model.parameters()).dtype
    scratch: Any = DynamicCache()
    _stack_run(policy, first, case.hidden.to(dtype).unsqueeze(0), scratch)
    return [(layer.keys, layer.values) for layer in scratch.layers[first:]]


def decision_logprobs(
    policy: StrategyPolicy, first: int, case: ReadCase, targets: Sequence[ReadTarget]
) -> list[torch.Tensor]:
    """Per target: the renormalised log-probability of each of its decisions, (D,)."""
    import torch
    from transformers import DynamicCache

    dtype = next(policy.model.parameters()).dtype
    upper = prompt_keys_values(policy, first, case)
    batch = len(targets)
    length = case.hidden.shape[0]
    k0, v0 = upper[0]
    # the frozen layers are never run here; their slots only give the cache its length
    dummy = torch.zeros((1, k0.shape[1], 1, k0.shape[3]), dtype=dtype, device=k0.device).expand(batch, -1, length, -1)
    data = [(dummy, dummy)] * first + [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in upper]
    cache = DynamicCache(ddp_cache_data=data, config=policy.model.config)
    width = max(t.hidden.shape[0] for t in targets)
    inputs = torch.zeros((batch, width, case.hidden.shape[1]), dtype=dtype, device=k0.device)
    for row, t in enumerate(targets):
        inputs[row, : t.hidden.shape[0]] = t.hidden.to(dtype)
    final = _stack_run(policy, first, inputs, cache)  # right padding: a row's tokens never see its pads
    head = policy.model.get_output_embeddings().weight
    out = []
    for row, t in enumerate(targets):
        values = []
        for position, allowed in zip(t.decisions, t.allowed, strict=True):
            ids = torch.tensor(allowed, dtype=torch.long, device=head.device)
            logits = (final[row, position] @ head[ids].T).float()
            chosen = allowed.index(t.tokens[position])
            values.append(torch.log_softmax(logits, dim=-1)[chosen])
        out.append(torch.stack(values) if values else torch.zeros(0, device=head.device))
    return out


def sft_loss(policy: StrategyPolicy, first: int, case: ReadCase) -> torch.Tensor:
    """Mean over the MR's good plans of the mean decision negative log-likelihood."""
    import torch

    per = decision_logprobs(policy, first, case, case.good)
    losses = [-lp.mean() for lp in per if lp.numel()]
    return torch.stack(losses).mean()


def plan_logprobs(policy: StrategyPolicy, first: int, case: ReadCase) -> tuple[list[float], list[float]]:
    """Summed decision log-probabilities of the good and the bad plans (no gradient): DPO's reference."""
    import torch

    with torch.no_grad():
        per = decision_logprobs(policy, first, case, [*case.good, *case.bad])
    sums = [float(x.sum()) for x in per]
    return sums[: len(case.good)], sums[len(case.good) :]


def dpo_loss(
    policy: StrategyPolicy, first: int, case: ReadCase, reference: tuple[list[float], list[float]], *, beta: float
) -> torch.Tensor:
    """DPO over every (good, bad) pair of the MR: −log σ(β[(log π − log π_ref)(good) − (…)(bad)])."""
    import torch

    per = decision_logprobs(policy, first, case, [*case.good, *case.bad])
    good = [x.sum() - r for x, r in zip(per[: len(case.good)], reference[0], strict=True)]
    bad = [x.sum() - r for x, r in zip(per[len(case.good) :], reference[1], strict=True)]
    terms = [-torch.nn.functional.logsigmoid(beta * (g - b)) for g in good for b in bad]
    return torch.stack(terms).mean()
