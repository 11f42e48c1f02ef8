"""The model in this process: transformers on a local model directory (CPU, or a GPU without vLLM).

It serves the same port as the HTTP backend so the CLI, the tests and the CPU rollouts of the
learning code run the same agent code against a local (tiny or trained) model, optionally with a
LoRA adapter from peft. A structured call is decoded under its JSON schema with xgrammar
(`agent.llm.grammar`), the engine vLLM uses, so a local model and the same model on vLLM are held to
the same schema; the answer is then validated like any other. By default a structured answer is
decoded by jump-forward (`agent.llm.jump_forward`): the text the grammar forces is appended without
a forward pass of its own, so the model is called once per choice, not once per token. Every path
(plain, constrained token by token, jump-forward) asks between two decoding steps whether the
model's deadline in a review has passed (`agent.llm.deadline`) and ends the call there with an
`LLMUnavailableError`, so the step that asked is reported not completed instead of holding the
review for as many steps as the answer would take. torch,
transformers and xgrammar are imported when the class is constructed, never when this module is
imported, so `api/` can import the factory cheaply.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry.trace import Tracer

from agent.llm.backend import ChatBackend, ChatRequest
from agent.llm.deadline import deadline_passed
from agent.llm.structured import check_output_size
from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import ConfigError, LLMContextLengthError, LLMError, LLMUnavailableError

if TYPE_CHECKING:
    import xgrammar as xgr

    from agent.llm.grammar import JsonSchemaGrammar
    from agent.llm.jump_forward import JumpForwardDecoder

Device = Literal["auto", "cpu", "cuda"]

PEFT_CHECKPOINTING_WARNING = r"`is_gradient_checkpointing` is deprecated"
SEED_STRIDE = 1_000_003  # answer j of a call draws from seed * stride + j: no two answers share a stream


class TransformersLLM(ChatBackend):
    """`SamplingLLM` over a local causal LM with a chat template; one generation at a time (a lock)."""

    keeps_length_bounds = True  # `agent.llm.grammar` holds strings to their bounds outside the grammar

    def __init__(
        self,
        model_path: Path,
        *,
        adapter_path: Path | None = None,
        device: Device = "auto",
        max_output_tokens: int = 512,
        max_output_chars: int | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        schema_in_prompt: bool = True,
        model_name: str | None = None,
        constrained: bool = True,
        jump_forward: bool = True,
        cpu_threads: int | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """`constrained=False` leaves structured answers unconstrained (prompt and validation only).

        `jump_forward` decodes a constrained answer a forward pass per choice, each of the `n`
        answers from one reading of the prompt; `jump_forward=False` decodes it token by token with
        `generate`. The forced text is tokenized on its own, so the two can write different (equally
        valid) answers.

        `cpu_threads` sets torch's intra-op threads for the whole process (None keeps torch's
        default, one per core): on a machine other processes share, one thread can be several times
        faster than two, which contend.
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_path = Path(model_path)
        if not (model_path / "config.json").is_file():
            raise ConfigError(f"no model at {model_path} (config.json is missing)")
        if adapter_path is not None and not (Path(adapter_path) / "adapter_config.json").is_file():
            raise ConfigError(f"no LoRA adapter at {adapter_path} (adapter_config.json is missing)")
        if max_output_tokens < 1:
            raise LLMError("max_output_tokens must be at least 1")
        if cpu_threads is not None:
            if cpu_threads < 1:
                raise ConfigError(f"cpu_threads must be at least 1, got {cpu_threads}")
            torch.set_num_threads(cpu_threads)
        self._torch = torch
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._device = torch.device(device)
        dtype = torch.bfloat16 if self._device.type == "cuda" else torch.float32
        self._tokenizer: Any = AutoTokenizer.from_pretrained(model_path)
        if not getattr(self._tokenizer, "chat_template", None):
            raise ConfigError(f"the tokenizer at {model_path} has no chat template")
        model: Any = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
        if adapter_path is not None:
            from peft import PeftModel

            with warnings.catch_warnings():
                # peft 0.21 reads `is_gradient_checkpointing`, which transformers 5 deprecated in
                # favour of `is_activation_checkpointing`; drop this once peft reads the new name.
                warnings.filterwarnings("ignore", message=PEFT_CHECKPOINTING_WARNING, category=FutureWarning)
                model = PeftModel.from_pretrained(model, str(adapter_path))
        self._model: Any = model.to(self._device).eval()
        config = self._model.config
        self._context_length = int(getattr(config, "max_position_embeddings", 0) or 2048)
        self._eos_token_id = self._model.generation_config.eos_token_id or self._tokenizer.eos_token_id
        self._pad_token_id = self._tokenizer.pad_token_id
        if self._pad_token_id is None:
            self._pad_token_id = self._tokenizer.eos_token_id
        self._grammar: JsonSchemaGrammar | None = None
        self._decoder: JumpForwardDecoder | None = None
        if constrained:
            from agent.llm.grammar import JsonSchemaGrammar
            from agent.llm.jump_forward import JumpForwardDecoder

            self._grammar = JsonSchemaGrammar(
                self._tokenizer, vocab_size=int(config.vocab_size), stop_token_ids=self._eos_ids()
            )
            if jump_forward:
                self._decoder = JumpForwardDecoder(
                    self._model, self._tokenizer, eos_ids=self._eos_ids(), device=self._device
                )
        suffix = f"+{Path(adapter_path).name}" if adapter_path is not None else ""
        super().__init__(
            provider="transformers",
            model_name=model_name or f"{model_path.name}{suffix}",
            max_output_tokens=max_output_tokens,
            max_output_chars=max_output_chars,
            temperature=temperature,
            seed=seed,
            schema_in_prompt=schema_in_prompt,
            tracer=tracer,
        )
        self._lock = threading.Lock()

    def _discover_context_tokens(self) -> int | None:
        return self._context_length  # from the model's config: trim before the prompt overflows it

    @property
    def model(self) -> Any:
        """The loaded (possibly peft-wrapped) model, for callers that score log-probabilities."""
        return self._model

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    # --- one generation ---------------------------------------------------------------------------

    def _generation_config(self, *, max_tokens: int, temperature: float, n: int) -> Any:
        from transformers import GenerationConfig

        # A fresh config, not the model's: a checkpoint's sampling defaults (temperature, top_p)
        # would otherwise leak into greedy decoding and change what "temperature 0" means.
        common: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "num_return_sequences": n,
            "eos_token_id": self._eos_token_id,
            "pad_token_id": self._pad_token_id,
        }
        if temperature > 0:
            return GenerationConfig(do_sample=True, temperature=temperature, top_p=1.0, **common)  # type: ignore[no-untyped-call]
        return GenerationConfig(do_sample=False, **common)  # type: ignore[no-untyped-call]

    def _sample(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
        if request.temperature <= 0:
            raise LLMError("sampling needs a temperature above 0")
        # `num_return_sequences` draws all `n` in one generation.
        return self._chat(messages, request)

    def _chat(self, messages: list[ChatMessage], request: ChatRequest) -> list[str]:
        from transformers import LogitsProcessorList, StoppingCriteriaList

        max_tokens = request.max_tokens
        schema = request.json_schema if self._grammar is not None else None
        # Compiled before the span and the lock: a schema that cannot constrain decoding costs no
        # model time (`LLMSchemaError`), and a compile does not hold up another caller's generation.
        compiled: xgr.CompiledGrammar | None = None
        processors: list[Any] = []
        if schema is not None and self._grammar is not None:
            if self._decoder is not None:
                compiled = self._grammar.compile(schema)
            else:
                processors.append(self._grammar.logits_processor(schema, batch_size=request.n))
        torch = self._torch
        with (
            self._span(request) as call,
            self._lock,
        ):
            if deadline_passed():  # waiting for the lock counts too
                raise LLMUnavailableError("the model's deadline passed before this generation")
            encoded = self._tokenizer.apply_chat_template(
                [dict(m) for m in messages], add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            input_ids = encoded["input_ids"].to(self._device)
            attention_mask = encoded["attention_mask"].to(self._device)
            prompt_tokens = int(input_ids.shape[1])
            if prompt_tokens + max_tokens > self._context_length:
                raise LLMContextLengthError(
                    f"the prompt has {prompt_tokens} tokens; with {max_tokens} to generate it exceeds "
                    f"the model's context of {self._context_length}",
                    context_tokens=self._context_length,
                    prompt_tokens=prompt_tokens,
                )
            rows: list[list[int]]
            if compiled is not None and schema is not None:
                rows = self._jump_forward(input_ids[0].tolist(), compiled, schema, request)
            else:
                config = self._generation_config(max_tokens=max_tokens, temperature=request.temperature, n=request.n)
                # Fork the RNG so a seeded call neither depends on nor disturbs the caller's random
                # state (a training loop shares this process).
                rng: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
                if self._seed is not None:
                    devices = [self._device.index or 0] if self._device.type == "cuda" else []
                    rng = torch.random.fork_rng(devices=devices)
                at_deadline = _stop_at_deadline()()
                with rng, torch.inference_mode():
                    if self._seed is not None:
                        torch.manual_seed(self._seed)
                    output = self._model.generate(
                        input_ids=input_ids,
                        attention_mask=attention_mask,
                        generation_config=config,
                        logits_processor=LogitsProcessorList(processors),
                        stopping_criteria=StoppingCriteriaList([at_deadline]),
                    )
                rows = output[:, prompt_tokens:].tolist()
                if at_deadline.fired and not all(self._ended(row) for row in rows):
                    raise _stopped_at_deadline(max(len(row) for row in rows), max_tokens)
            call.response_model = self._model_name
            call.input_tokens = prompt_tokens
            call.output_tokens = sum(1 for row in rows for token in row if token != self._pad_token_id)
            call.finish_reasons = [
                "length" if len(row) >= max_tokens and not self._ended(row) else "stop" for row in rows
            ]
            texts = self._tokenizer.batch_decode(rows, skip_special_tokens=True)
            return [check_output_size(str(t), max_chars=self._max_output_chars) for t in texts]

    def _jump_forward(
        self, prompt: list[int], compiled: xgr.CompiledGrammar, schema: dict[str, Any], request: ChatRequest
    ) -> list[list[int]]:
        """`request.n` answers under `compiled`, each decoded by jump-forward from one reading of the
        prompt: greedy at temperature 0 (one answer, repeated), else sampled from seeded streams."""
        assert self._decoder is not None and self._grammar is not None  # only called when constrained
        decoder, grammar = self._decoder, self._grammar
        greedy = request.temperature <= 0
        # Unseeded, the streams start from torch's random state, as `generate` would sample from it.
        base = self._seed if self._seed is not None else int(self._torch.randint(0, 2**31 - 1, ()).item())
        answers = 1 if greedy else request.n
        read = decoder.prefill(prompt) if answers > 1 else None  # one answer reads it without a copy
        rows = []
        for j in range(answers):
            result = decoder.decode(
                prompt,
                compiled,
                max_new_tokens=request.max_tokens,
                temperature=request.temperature,
                seed=base * SEED_STRIDE + j,
                prefilled=read,
                bounds=grammar.bounds_guard(schema),
                should_stop=deadline_passed,
            )
            if result.stopped:
                raise _stopped_at_deadline(len(result.tokens), request.max_tokens)
            rows.append(result.tokens)
        return rows * request.n if greedy else rows

    def _eos_ids(self) -> list[int]:
        eos = self._eos_token_id if isinstance(self._eos_token_id, list) else [self._eos_token_id]
        return [int(t) for t in eos]

    def _ended(self, row: list[int]) -> bool:
        eos = set(self._eos_ids())
        return any(token in eos for token in row)


def _stopped_at_deadline(tokens: int, max_tokens: int) -> LLMUnavailableError:
    return LLMUnavailableError(
        f"the model's deadline passed during this generation, after {tokens} of at most {max_tokens} token(s)"
    )


@functools.cache
def _stop_at_deadline() -> Any:
    """A `generate` stopping criterion that ends every sequence once `deadline_passed`, and remembers
    that it did (`fired`). transformers calls it after each generated token: a step at most past the
    deadline. Built on first use: transformers loads late."""
    import torch
    from transformers import StoppingCriteria

    class StopAtDeadline(StoppingCriteria):
        def __init__(self) -> None:
            self.fired = False

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            self.fired = self.fired or deadline_passed()
            return torch.full((input_ids.shape[0],), self.fired, device=input_ids.device, dtype=torch.bool)

    return StopAtDeadline
