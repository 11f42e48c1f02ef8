"""The strategy policy π(z | s1) being trained: a causal LM (LoRA through peft by default) and its tokenizer.

It turns s1 into prompt token ids with the chat template (the same `strategy_messages` the SFT data
and the strategy node use), samples strategy completions on the CPU with transformers (the vLLM
backend in `vllm_backend.py` samples on a GPU behind the same `StrategySampler` protocol), and scores
token log-probabilities and entropy for the PPO update. Log-probabilities are those of the sampling
distribution: logits are divided by the sampling temperature, as TRL's GRPOTrainer does, so the PPO
ratio starts at 1.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from agent.strategy import strategy_messages
from reviewers.kernel.errors import ConfigError, TrainingError

if TYPE_CHECKING:
    import torch

# peft 0.21 reads `is_gradient_checkpointing`, which transformers 5 deprecated; drop once peft reads
# the new name (the same filter agent/llm/transformers_local.py uses).
PEFT_CHECKPOINTING_WARNING = r"`is_gradient_checkpointing` is deprecated"
Device = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class PolicyConfig:
    """How the policy is loaded and adapted."""

    use_lora: bool = field(default=True, metadata={"help": "train a LoRA adapter (peft) instead of every weight"})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (scale = alpha / r)"})
    lora_dropout: float = field(
        default=0.0, metadata={"help": "dropout on the LoRA branch (0: the PPO ratio is exact)"}
    )
    lora_target_modules: tuple[str, ...] | None = field(
        default=None, metadata={"help": "module names to adapt; None adapts every linear layer but the head"}
    )
    lora_modules_to_save: tuple[str, ...] | None = field(
        default=None, metadata={"help": "modules trained in full beside the adapter and saved with it"}
    )
    device: Device = field(default="auto", metadata={"help": "auto uses CUDA when available, else the CPU"})
    bf16: bool | None = field(default=None, metadata={"help": "bfloat16 weights; None = on for CUDA"})

    def __post_init__(self) -> None:
        if self.lora_r < 1 or self.lora_alpha < 1 or not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(
                f"bad LoRA settings: r={self.lora_r}, alpha={self.lora_alpha}, dropout={self.lora_dropout}"
            )


@dataclass(frozen=True)
class TokenScores:
    """Per-token numbers of a batch's completions, (B, C): column j is each completion's j-th token."""

    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor | None  # a scalar: mean entropy over the mask (only when asked for)


class StrategySampler(Protocol):
    """Samples completions (token ids, end-of-turn included when produced) for prompts given as token ids."""

    def sample(
        self, prompts: Sequence[Sequence[int]], *, n: int, temperature: float, max_new_tokens: int, seed: int
    ) -> list[list[list[int]]]: ...


def resolve_device(device: Device) -> str:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise TrainingError("device is cuda but no CUDA device is available")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class StrategyPolicy:
    """A causal LM with a chat template; `model` is peft-wrapped when LoRA is on."""

    def __init__(self, model: Any, tokenizer: Any, *, device: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.prompt_cache: PromptCache | None = None
        eos = model.generation_config.eos_token_id or tokenizer.eos_token_id
        self.eos_ids: list[int] = list(eos) if isinstance(eos, list | tuple) else [int(eos)]
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0])

    @classmethod
    def load(
        cls, base_model: Path, *, adapter: Path | None = None, config: PolicyConfig | None = None
    ) -> StrategyPolicy:
        """The base model (a local directory), with `adapter` loaded trainable or a fresh LoRA on top."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        config = config or PolicyConfig()
        base_model = Path(base_model)
        if not (base_model / "config.json").is_file():
            raise TrainingError(f"base model path {base_model} is not a model directory (no config.json)")
        if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
            raise TrainingError(f"no LoRA adapter at {adapter} (adapter_config.json is missing)")
        device = resolve_device(config.device)
        bf16 = config.bf16 if config.bf16 is not None else device == "cuda"
        tokenizer = AutoTokenizer.from_pretrained(str(base_model))
        if not getattr(tokenizer, "chat_template", None):
            raise TrainingError(f"the tokenizer in {base_model} has no chat template; use an instruct/chat model")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(base_model), dtype=torch.bfloat16 if bf16 else torch.float32, local_files_only=True
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=PEFT_CHECKPOINTING_WARNING, category=FutureWarning)
            if adapter is not None:
                from peft import PeftModel

                model = PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
            elif config.use_lora:
                from peft import LoraConfig, get_peft_model

                model = get_peft_model(
                    model,
                    LoraConfig(
                        task_type="CAUSAL_LM",
                        r=config.lora_r,
                        lora_alpha=config.lora_alpha,
                        lora_dropout=config.lora_dropout,
                        target_modules=list(config.lora_target_modules) if config.lora_target_modules else "all-linear",
                        modules_to_save=list(config.lora_modules_to_save) if config.lora_modules_to_save else None,
                    ),
                )
        model.to(device)
        return cls(model, tokenizer, device=device)

    @property
    def is_peft(self) -> bool:
        return hasattr(self.model, "peft_config")

    @contextlib.contextmanager
    def decoding(self) -> Iterator[None]:
        """The model set for decoding: in eval mode, with a LoRA adapter merged into the weights (peft's
        unmerged forward runs three matmuls per adapted layer, and decoding is overhead-bound); both
        undone after, so training goes on where it was."""
        merged = self.is_peft
        was_training = self.model.training
        if merged:
            self.model.merge_adapter()
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)
            if merged:
                self.model.unmerge_adapter()

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def save(self, out_dir: Path) -> None:
        """The adapter (or the whole model without LoRA) and the tokenizer, loadable offline."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(out_dir))
        self.tokenizer.save_pretrained(str(out_dir))

    # --- prompts and sampling -------------------------------------------------------------------------

    def prompt_ids(self, s1: str) -> list[int]:
        """Token ids of the strategy chat prompt over s1, ending where the assistant's answer starts."""
        text = self.tokenizer.apply_chat_template(strategy_messages(s1), tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(str(text), add_special_tokens=False)["input_ids"])

    def decode(self, completion: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(completion), skip_special_tokens=True))

    def _trim(self, ids: Sequence[int]) -> list[int]:
        """A generated row up to and including its first end-of-turn, padding dropped."""
        out: list[int] = []
        for token in ids:
            out.append(int(token))
            if token in self.eos_ids:
                break
        while out and out[-1] == self.pad_id and self.pad_id not in self.eos_ids:
            out.pop()
        return out

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        logits_processors: Sequence[Any] = (),
    ) -> list[list[list[int]]]:
        """`n` completions per prompt; temperature 0 decodes greedily (then n must be 1). `logits_processors`
        go to `generate` (learning/strata/constrained.py masks each row to its schema with one)."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        if temperature <= 0 and n != 1:
            raise TrainingError("greedy decoding gives one completion per prompt; use n=1")
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
            if temperature > 0
            else {"do_sample": False}
        )
        generation = GenerationConfig(  # type: ignore[no-untyped-call]
            max_new_tokens=max_new_tokens,
            num_return_sequences=n,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            **sampling,
        )
        width = max(len(p) for p in prompts)
        # Left padding: decoder-only generation continues right after each prompt.
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention[row, width - len(prompt) :] = 1
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.manual_seed(seed)
                out = self.model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=attention.to(self.device),
                    generation_config=generation,
                    logits_processor=LogitsProcessorList(list(logits_processors)) if logits_processors else None,
                )
        finally:
            self.model.train(was_training)
        rows = [self._trim(row[width:].tolist()) for row in out]
        return [rows[i * n : (i + 1) * n] for i in range(len(prompts))]

    # --- the prompt read once -----------------------------------------------------------------------

    def enable_prompt_cache(self, max_bytes: int = 0, *, shared: PromptCache | None = None) -> None:
        """Read each prompt once: keep its key/value cache (all but its last token) and score or decode
        only the tokens after it. Exact only while training cannot change a prompt's keys and values:
        every trainable weight is in the last layer and none is its key or value projection
        (`prompt_cache_problem`); refused otherwise. Then the keys and values are the base model's, so
        policies over the same base model (other adapters, other stages) may share one cache."""
        problem = prompt_cache_problem(self)
        if problem:
            raise TrainingError(f"the prompt cache would be stale: {problem}")
        self.prompt_cache = shared if shared is not None else PromptCache(max_bytes=max_bytes)

    def _score_cached(
        self, cache: PromptCache, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per row: logits over its completion's tokens, read after its cached prompt. Returns (B, C, V)
        logits, (B, C) targets and (B, C) mask."""
        import torch

        width = max(len(c) for c in completions)
        rows, targets = [], torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.float32)
        for row, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            inputs = cache.last_layer_input(self, p, c) if cache.keep_last_layer_inputs else None
            if inputs is not None:  # the layers below the adapter are read once per (prompt, completion)
                logits = _last_layer_logits(self, cache.get_last_layer(self, p), inputs)
            else:
                feed = torch.tensor([[p[-1], *c[:-1]]], dtype=torch.long, device=self.device)
                logits = self.model(input_ids=feed, cache=cache.get(self, p), use_cache=True).logits[0].float()
            rows.append(torch.nn.functional.pad(logits, (0, 0, 0, width - len(c))))
            targets[row, : len(c)] = torch.tensor(list(c), dtype=torch.long)
            mask[row, : len(c)] = 1.0
        return torch.stack(rows), targets.to(self.device), mask.to(self.device)

    # --- scoring ----------------------------------------------------------------------------------

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        completions: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> TokenScores:
        """Log-probabilities of each completion token given its prompt (with grad when enabled)."""
        import torch

        from learning.strata.loss import token_entropy

        if len(prompts) != len(completions) or not prompts:
            raise TrainingError(f"{len(prompts)} prompts but {len(completions)} completions")
        if any(not c for c in completions):
            raise TrainingError("an empty completion has no token to score")
        if self.prompt_cache is not None:
            logits, targets, mask = self._score_cached(self.prompt_cache, prompts, completions)
            if temperature > 0:
                logits = logits / temperature
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1) * mask
            entropy = token_entropy(logits.detach(), mask) if with_entropy else None
            return TokenScores(logprobs=logprobs, mask=mask, entropy=entropy)
        lengths = [len(p) + len(c) for p, c in zip(prompts, completions, strict=True)]
        width = max(lengths)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            ids[row, : lengths[row]] = torch.tensor([*p, *c], dtype=torch.long)
            attention[row, : lengths[row]] = 1
        ids, attention = ids.to(self.device), attention.to(self.device)
        # Only completion positions are scored: from the shortest prompt's end on, then gathered so
        # that column j is each row's j-th completion token (rows line up with the token targets).
        start = min(len(p) for p in prompts)
        # Logits only from the last prompt token on: a real vocabulary times a long prompt is gigabytes.
        keep = ids.shape[1] - start + 1
        logits = self.model(input_ids=ids, attention_mask=attention, logits_to_keep=keep).logits[:, :-1, :].float()
        if temperature > 0:
            logits = logits / temperature
        width = max(len(c) for c in completions)
        index = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.float32)
        for row, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            first = len(p) - start
            index[row, : len(c)] = torch.arange(first, first + len(c))
            mask[row, : len(c)] = 1.0
        index, mask = index.to(self.device), mask.to(self.device)
        logits = logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        targets = ids[:, start:].gather(1, index)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1) * mask
        entropy = token_entropy(logits.detach(), mask) if with_entropy else None
        return TokenScores(logprobs=logprobs, mask=mask, entropy=entropy)


def prompt_cache_problem(policy: StrategyPolicy) -> str | None:
    """Why a cached prompt would go stale as `policy` trains, or None: a trainable weight outside the
    last layer changes what every later layer reads of the prompt, and the last layer's key or value
    projection changes that layer's own prompt keys and values."""
    layers = int(policy.model.config.num_hidden_layers)
    last = f"layers.{layers - 1}."
    for name, param in policy.model.named_parameters():
        if not param.requires_grad:
            continue
        if last not in name:
            return f"{name} is trainable and not in the last layer"
        if "k_proj" in name or "v_proj" in name:
            return f"{name} is trainable and projects the prompt's keys or values"
    return None


class PromptCache:
    """Prompts' key/value caches (all tokens but the last), least recently used dropped past `max_bytes`.
    Kept as bfloat16 and widened on use: every reader of a prompt sees the same rounded values. Share
    one only between policies over the same base model.

    With `keep_last_layer_inputs` it also keeps, per (prompt, completion) scored, what the last layer
    reads: the hidden states every layer below it hands up. Those layers carry no trainable weight
    (`prompt_cache_problem`), so their output is the base model's whatever the adapter, and a
    completion scored again (the PPO update after the old log-probabilities, every SFT and DPO epoch
    over the same examples) runs the last layer, the norm and the head only: about a fifth of the
    model's work per token on SmolLM2-135M (one of 30 layers, and the 49k-word head)."""

    def __init__(self, *, max_bytes: int, keep_last_layer_inputs: bool = True) -> None:
        self.max_bytes = max_bytes
        self.keep_last_layer_inputs = keep_last_layer_inputs
        self.entries: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.inputs: dict[tuple[tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
        self.bytes = 0
        self.reads = 0  # prompts read by the model (cache misses)
        self.lower_reads = 0  # completions read through the layers below the last (misses of `inputs`)

    def _stored(self, policy: StrategyPolicy, prompt: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        key = tuple(int(t) for t in prompt[:-1])
        stored = self.entries.pop(key, None)
        if stored is None:
            stored = self._read(policy, key)
        self.entries[key] = stored  # most recently used last
        return stored

    def warm(self, policy: StrategyPolicy, prompts: Sequence[Sequence[int]]) -> int:
        """Read every prompt not yet cached (all tokens but the last, as `get` keys them); how many were
        read. Past `max_bytes` the least recently used are dropped again, so warm only what fits."""
        before = self.reads
        for prompt in prompts:
            self._stored(policy, prompt)
        return self.reads - before

    def get(self, policy: StrategyPolicy, prompt: Sequence[int]) -> Any:
        """A fresh `DynamicCache` holding `prompt[:-1]`; the caller feeds `prompt[-1]` next."""
        from transformers import DynamicCache

        stored = self._stored(policy, prompt)
        dtype = next(policy.model.parameters()).dtype
        layers = [(k.to(dtype), v.to(dtype)) for k, v in stored]
        return DynamicCache(ddp_cache_data=layers, config=policy.model.config)

    def get_last_layer(self, policy: StrategyPolicy, prompt: Sequence[int]) -> Any:
        """`get`, with only the last layer's keys and values widened: the others are there for their
        length (positions and the mask are read from the first layer) and are never attended to."""
        from transformers import DynamicCache

        stored = self._stored(policy, prompt)
        dtype = next(policy.model.parameters()).dtype
        layers = [*stored[:-1], (stored[-1][0].to(dtype), stored[-1][1].to(dtype))]
        return DynamicCache(ddp_cache_data=layers, config=policy.model.config)

    def last_layer_input(
        self, policy: StrategyPolicy, prompt: Sequence[int], completion: Sequence[int]
    ) -> torch.Tensor | None:
        """What the last layer reads over `[prompt[-1], *completion[:-1]]` after the cached prompt,
        (1, C, hidden), read once; None where the model is not a stack of layers this can split."""
        import torch

        stack = _decoder_stack(policy.model)
        if stack is None:
            return None
        key = (tuple(int(t) for t in prompt), tuple(int(t) for t in completion))
        kept = self.inputs.pop(key, None)
        if kept is None:
            feed = torch.tensor([[prompt[-1], *completion[:-1]]], dtype=torch.long, device=policy.device)
            cache = self.get(policy, prompt)  # read (when new) by the whole model, outside the split below
            captured: list[torch.Tensor] = []
            hook = stack.norm.register_forward_pre_hook(lambda _module, args: captured.append(args[0].detach()))
            try:
                with torch.no_grad(), _only_layers(stack, slice(None, -1)):
                    policy.model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1)
            finally:
                hook.remove()
            kept = captured[0]
            self.lower_reads += 1
            self.bytes += kept.numel() * kept.element_size()
        self.inputs[key] = kept  # most recently used last
        self._evict(keep_prompt=key[0][:-1], keep_input=key)
        return kept

    def _read(self, policy: StrategyPolicy, key: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        import torch

        model = policy.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                ids = torch.tensor([list(key)], dtype=torch.long, device=policy.device)
                cache = model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
        finally:
            model.train(was_training)
        stored = [(layer.keys.to(torch.bfloat16), layer.values.to(torch.bfloat16)) for layer in cache.layers]
        self.reads += 1
        self.bytes += _size(stored)
        self._evict()
        return stored

    def _evict(
        self,
        *,
        keep_prompt: tuple[int, ...] | None = None,
        keep_input: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> None:
        """Least recently used first, kept inputs before prompts (a prompt costs seconds to read again,
        an input a fraction of that); never the prompt or input just used."""
        for pair in [k for k in self.inputs if k != keep_input]:
            if self.bytes <= self.max_bytes:
                return
            dropped = self.inputs.pop(pair)
            self.bytes -= dropped.numel() * dropped.element_size()
        for prompt in [k for k in self.entries if k != keep_prompt]:
            if self.bytes <= self.max_bytes:
                return
            self.bytes -= _size(self.entries.pop(prompt))


def _decoder_stack(model: Any) -> Any:
    """The module holding the decoder layers and the final norm (`model.model` of a Llama-style causal
    LM, under peft's wrapper), or None for another shape."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    stack = getattr(base, "model", None)
    if stack is None or not hasattr(stack, "layers") or not hasattr(stack, "norm"):
        return None
    return stack


@contextlib.contextmanager
def _only_layers(stack: Any, layers: slice) -> Iterator[None]:
    """The stack runs `layers` of its decoder layers only (each keeps its index into the cache)."""
    import torch

    every = stack.layers
    stack.layers = torch.nn.ModuleList(list(every)[layers])
    try:
        yield
    finally:
        stack.layers = every


def _last_layer_logits(policy: StrategyPolicy, cache: Any, inputs: torch.Tensor) -> torch.Tensor:
    """(C, V) logits of the last layer, the norm and the head over `inputs` (what the layers below hand
    up), after the prompt in `cache`: the same numbers as the whole model over the completion."""
    stack = _decoder_stack(policy.model)
    with _only_layers(stack, slice(-1, None)):
        out = policy.model(inputs_embeds=inputs, cache=cache, use_cache=True)
    logits: torch.Tensor = out.logits[0].float()
    return logits


def _size(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
