"""A prompt cache for an adapter on the last K layers, key and value projections included (issue 41).

`PromptCache` keeps every layer's keys and values of a prompt, which is exact only while the adapter
sits on the last layer and leaves its key and value projections alone: then the model cannot re-read
the prompt, and the issue-41 audit found every stage trained that way learned one MR-independent habit.
This cache generalises it: layers below `first_trainable` carry no trainable weight, so their keys
and values and the hidden states they hand up to layer `first_trainable` are the base model's whatever
the adapter; they are read once per prompt and kept. The last K layers are run over the kept hidden
states on every use, with the current adapter (and with gradients while training), so the adapter
changes what the model reads of the prompt at a cost of K of the model's layers per prompt, not all.

`get` returns the same `DynamicCache` a full read of the prompt by the current model would give (up to
bfloat16 rounding of what is kept), so the samplers (jump-forward, constrained) and `StrategyPolicy.score`
use it unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from learning.strata.policy import PromptCache, _decoder_stack, _only_layers, _size
from reviewers.kernel.errors import TrainingError

if TYPE_CHECKING:
    import torch

    from learning.strata.policy import StrategyPolicy


def deep_lora_targets(model_dir_config: dict[str, Any], layers: int, modules: Sequence[str]) -> tuple[str, ...]:
    """`modules` of the last `layers` decoder layers, as peft target names."""
    total = int(model_dir_config["num_hidden_layers"])
    if not 1 <= layers <= total:
        raise TrainingError(f"cannot adapt the last {layers} of {total} layers")
    return tuple(f"model.layers.{i}.{m}" for i in range(total - layers, total) for m in modules)


def first_trainable_layer(policy: StrategyPolicy) -> int:
    """The lowest decoder layer holding a trainable weight (the number of layers when none does)."""
    layers = int(policy.model.config.num_hidden_layers)
    first = layers
    for name, param in policy.model.named_parameters():
        if not param.requires_grad:
            continue
        marker = name.split("layers.", 1)
        if len(marker) != 2:
            raise TrainingError(f"{name} is trainable and not in a decoder layer: no prompt cache is exact")
        first = min(first, int(marker[1].split(".", 1)[0]))
    return first


def read_frozen(
    policy: StrategyPolicy, first: int, ids: Sequence[int], cache: Any = None
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """`ids` through layers 0..first-1 only (after `cache`, a `DynamicCache` of those layers, when
    given): their keys and values (the cache's, prompt and `ids`) and the hidden states they hand up
    over `ids`, (len(ids), hidden)."""
    import torch

    stack = _decoder_stack(policy.model)
    if stack is None:
        raise TrainingError("the deep prompt cache needs a Llama-style stack of decoder layers")
    model = policy.model
    was_training = model.training
    model.eval()
    captured: list[torch.Tensor] = []
    hook = stack.norm.register_forward_pre_hook(lambda _module, args: captured.append(args[0].detach()))
    try:
        with torch.no_grad(), _only_layers(stack, slice(None, first)):
            feed = torch.tensor([list(ids)], dtype=torch.long, device=policy.device)
            out = stack(input_ids=feed, cache=cache, use_cache=True)
    finally:
        hook.remove()
        model.train(was_training)
    layers = out.past_key_values.layers[:first]
    return [(layer.keys, layer.values) for layer in layers], captured[0][0]


class DeepPromptCache(PromptCache):
    """Per prompt (all tokens but the last): the frozen layers' keys and values and the hidden states
    entering layer `first_trainable`, kept as bfloat16; the trainable layers are recomputed on `get`."""

    def __init__(self, *, max_bytes: int, first_trainable: int, dtype: torch.dtype | None = None) -> None:
        import torch

        super().__init__(max_bytes=max_bytes, keep_last_layer_inputs=False)
        self.first_trainable = first_trainable
        self.dtype = dtype if dtype is not None else torch.bfloat16  # float32 in tests: exact
        self.hidden: dict[tuple[int, ...], torch.Tensor] = {}

    def check(self, policy: StrategyPolicy) -> None:
        """Refuse a policy with a trainable weight below `first_trainable` (the cache would be stale)."""
        first = first_trainable_layer(policy)
        if first < self.first_trainable:
            raise TrainingError(
                f"layer {first} is trainable, below the cache's first recomputed layer {self.first_trainable}"
            )

    def _read(self, policy: StrategyPolicy, key: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        stored, hidden = read_frozen(policy, self.first_trainable, list(key))
        stored = [(k.to(self.dtype), v.to(self.dtype)) for k, v in stored]
        hidden = hidden.to(self.dtype)
        self.hidden[key] = hidden
        self.reads += 1
        self.bytes += _size(stored) + hidden.numel() * hidden.element_size()
        self._evict()
        return stored

    def put(self, prompt: Sequence[int], stored: list[tuple[torch.Tensor, torch.Tensor]], hidden: torch.Tensor) -> None:
        """A prompt read elsewhere (`read_frozen`, kept on disk): its frozen layers' keys and values and
        the hidden states entering the first recomputed layer."""
        key = tuple(int(t) for t in prompt[:-1])
        self.entries[key] = [(k.to(self.dtype), v.to(self.dtype)) for k, v in stored]
        self.hidden[key] = hidden.to(self.dtype)
        self.bytes += _size(self.entries[key]) + self.hidden[key].numel() * self.hidden[key].element_size()

    def _evict(self, **_: Any) -> None:
        for prompt in list(self.entries):
            if self.bytes <= self.max_bytes:
                return
            hidden = self.hidden.pop(prompt)
            self.bytes -= _size(self.entries.pop(prompt)) + hidden.numel() * hidden.element_size()

    def upper(self, policy: StrategyPolicy, prompt: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The trainable layers' keys and values of `prompt[:-1]` under the current adapter (with
        gradients when they are enabled)."""
        from transformers import DynamicCache

        stored = self._stored(policy, prompt)
        key = tuple(int(t) for t in prompt[:-1])
        dtype = next(policy.model.parameters()).dtype
        stack = _decoder_stack(policy.model)
        if self.first_trainable >= len(stack.layers):
            return []
        scratch: Any = DynamicCache()
        with _only_layers(stack, slice(self.first_trainable, None)):
            policy.model(
                inputs_embeds=self.hidden[key].to(dtype).unsqueeze(0), cache=scratch, use_cache=True, logits_to_keep=1
            )
        del stored
        return [(layer.keys, layer.values) for layer in scratch.layers[self.first_trainable :]]

    def get(self, policy: StrategyPolicy, prompt: Sequence[int]) -> Any:
        from transformers import DynamicCache

        stored = self._stored(policy, prompt)
        dtype = next(policy.model.parameters()).dtype
        lower = [(k.to(dtype), v.to(dtype)) for k, v in stored]
        return DynamicCache(ddp_cache_data=[*lower, *self.upper(policy, prompt)], config=policy.model.config)

    def get_last_layer(self, policy: StrategyPolicy, prompt: Sequence[int]) -> Any:
        return self.get(policy, prompt)


def expand_cache(layers: Sequence[tuple[torch.Tensor, torch.Tensor]], batch: int, config: Any) -> Any:
    """A fresh `DynamicCache` over `layers` repeated `batch` times (views: no copy)."""
    from transformers import DynamicCache

    data = [(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in layers]
    return DynamicCache(ddp_cache_data=data, config=config)
