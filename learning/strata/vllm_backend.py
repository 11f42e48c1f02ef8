"""Strategy sampling on a GPU through vLLM, colocated with the trainer, with weight sync as TRL does it.

`VLLMSampler` implements `StrategySampler` (policy.py): prompts go in as token ids, completions come
back as token ids, so the trainer scores exactly what vLLM sampled. vLLM runs in the training process
(TRL's "colocate" mode: `distributed_executor_backend="external_launcher"`, a share of the GPU's
memory) and is brought up to date after every optimizer step (`sync`), in one of two ways:

- `merge` (TRL 1.16's `VLLMGeneration.sync_weights` in colocate mode): merge the LoRA adapter into
  the base weights, push every tensor into vLLM's model with `load_weights` under vLLM's names,
  unmerge, and reset the prefix cache. Works with and without LoRA.
- `lora`: save the adapter and hand vLLM a new `LoRARequest` for the next generations (vLLM loads it
  as it would for multi-LoRA serving). Needs `enable_lora`; only for a peft policy.

vLLM is optional (the `gpu` extra, pinned to the range TRL's `vllm` extra supports) and imported
only when a sampler is built; without it `require_vllm` raises one clear TrainingError. This module
is exercised by scripts/gpu_strata_smoke.py on a GPU machine; CPU tests use transformers.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from reviewers.kernel.errors import ConfigError, TrainingError

if TYPE_CHECKING:
    from learning.strata.policy import StrategyPolicy

WeightSync = Literal["merge", "lora"]
# vLLM's memory profiler is misled by its large default batch-token budget on a shared GPU (TRL sets
# the same value for colocate mode).
MAX_NUM_BATCHED_TOKENS = 4096


@dataclass(frozen=True)
class VLLMConfig:
    """The colocated vLLM engine's settings."""

    gpu_memory_utilization: float = field(
        default=0.3, metadata={"help": "share of GPU memory vLLM may take (the trainer needs the rest)"}
    )
    max_model_len: int = field(default=4096, metadata={"help": "prompt + completion tokens vLLM plans for"})
    weight_sync: WeightSync = field(
        default="merge", metadata={"help": "'merge' (load merged weights, as TRL) or 'lora' (a LoRARequest)"}
    )
    max_lora_rank: int = field(default=64, metadata={"help": "largest adapter rank vLLM reserves for ('lora')"})
    dtype: str = field(default="bfloat16", metadata={"help": "vLLM's weight dtype"})
    enforce_eager: bool = field(default=False, metadata={"help": "skip CUDA graphs (slower, starts faster)"})

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0 or self.max_model_len < 1 or self.max_lora_rank < 1:
            raise ConfigError(f"bad vLLM config: {self}")
        if self.weight_sync not in ("merge", "lora"):
            raise ConfigError(f"weight_sync must be 'merge' or 'lora', got {self.weight_sync!r}")


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    """One clear error when vLLM (or a GPU for it) is missing."""
    if not vllm_available():
        raise TrainingError(
            "generation_backend 'vllm' needs vLLM: install the gpu extra (pip install '.[gpu]') on a machine "
            "with a CUDA GPU, or use generation_backend 'transformers'"
        )
    import torch

    if not torch.cuda.is_available():
        raise TrainingError("generation_backend 'vllm' needs a CUDA GPU; none is visible")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _single_process_env() -> None:
    """The torch.distributed variables the external launcher reads, for a one-process run (as TRL sets them)."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))


def vllm_parameter_names(model: Any) -> Iterator[tuple[str, Any]]:
    """(vLLM name, tensor) for every weight of a (merged) model, as TRL's `_iter_named_params` names them."""
    is_peft = hasattr(model, "peft_config")
    prefix = getattr(model, "prefix", "lora_")
    for name, param in model.named_parameters():
        if is_peft:
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if prefix in name or "original_module" in name:
                continue  # adapter weights are merged in already; the original of a saved module is stale
            name = name.replace("modules_to_save.default.", "")
        yield name.replace("_checkpoint_wrapped_module.", ""), param.data


class VLLMSampler:
    """`StrategySampler` on a colocated vLLM engine; call `sync(policy, step)` after each update."""

    def __init__(self, model_path: Path, *, eos_ids: Sequence[int], config: VLLMConfig | None = None, seed: int = 0):
        require_vllm()
        from vllm import LLM

        self.config = config or VLLMConfig()
        self.eos_ids = [int(i) for i in eos_ids]
        self.model_path = Path(model_path)
        self._lora: Any = None
        self._synced_step: int | None = None
        _single_process_env()
        self.llm = LLM(
            model=str(self.model_path),
            gpu_memory_utilization=self.config.gpu_memory_utilization,
            max_model_len=self.config.max_model_len,
            dtype=self.config.dtype,
            enforce_eager=self.config.enforce_eager,
            enable_lora=self.config.weight_sync == "lora",
            max_lora_rank=self.config.max_lora_rank,
            distributed_executor_backend="external_launcher",
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            seed=seed,
        )

    def sample(
        self, prompts: Sequence[Sequence[int]], *, n: int, temperature: float, max_new_tokens: int, seed: int
    ) -> list[list[list[int]]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if temperature <= 0 and n != 1:
            raise TrainingError("greedy decoding gives one completion per prompt; use n=1")
        params = SamplingParams(
            n=n,
            temperature=max(temperature, 0.0),
            top_p=1.0,
            top_k=-1,  # the whole distribution: the trainer's log-probabilities are over all tokens
            max_tokens=max_new_tokens,
            seed=seed,
            stop_token_ids=self.eos_ids,
        )
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            params,
            lora_request=self._lora,
            use_tqdm=False,
        )
        rows: list[list[list[int]]] = []
        for output in outputs:
            completions = []
            for choice in output.outputs:
                ids = [int(t) for t in choice.token_ids]
                # the end-of-turn token is what the policy learns to stop with: keep it in the sequence
                if choice.finish_reason == "stop" and (not ids or ids[-1] not in self.eos_ids):
                    ids.append(self.eos_ids[0])
                completions.append(ids)
            rows.append(completions)
        return rows

    def sync(self, policy: StrategyPolicy, step: int, *, work_dir: Path | None = None) -> None:
        """Bring vLLM's weights to the policy's (after optimizer step `step`)."""
        if self._synced_step == step:
            return
        if self.config.weight_sync == "lora":
            if not policy.is_peft:
                raise TrainingError("weight_sync 'lora' needs a LoRA policy; use weight_sync 'merge'")
            from vllm.lora.request import LoRARequest

            target = (work_dir or self.model_path.parent / "vllm-sync") / f"step-{step}"
            policy.model.save_pretrained(str(target))
            # a new id per step: vLLM caches adapters by id
            self._lora = LoRARequest(f"strata-step-{step}", step + 1, str(target))
        else:
            engine_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
            model = policy.model
            merged = policy.is_peft
            if merged:
                model.merge_adapter()
            try:
                for name, tensor in vllm_parameter_names(model):
                    engine_model.load_weights([(name, tensor)])
            finally:
                if merged:
                    model.unmerge_adapter()
            self.llm.reset_prefix_cache()
        self._synced_step = step
