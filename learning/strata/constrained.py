"""Grammar-constrained strategy sampling for RL: one JSON schema per merge request (per row).

Untrained SmolLM2 writes invented paths and broken JSON unconstrained, so nearly every rollout is
invalid and every advantage is zero. Under its merge request's schema (agent/strategy_schema.py:
focus paths an enum of the changed files, reviewers an enum) every sample is a usable plan and RL
has the content to learn. A batch holds many merge requests, so each row gets its own grammar
matcher (agent/llm/grammar.py's processor shares one grammar across a batch).

Which log-probabilities PPO uses: the sampled tokens are scored under the *unmasked* policy (the
trainer's `StrategyPolicy.score`), both for the old and the new policy, so the PPO ratio is a ratio
of one distribution and starts at 1. The samples come from the masked distribution, so the update is
slightly off-policy for the tokens the grammar forced; renormalising over the allowed set instead
would need the mask at every position at scoring time (a grammar replay per row), and on the
decisions the grammar leaves open (which reviewer, which paths, in what order) the two differ only
by the mass of the tokens it forbids. The entropy logged is the unmasked one too.

Only the transformers path: vLLM's guided decoding takes one schema per request, and the trainer's
vLLM sampler batches requests without one (RLTrainConfig refuses the combination with one line).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.strategy import focus_path_cap, plan_schema
from learning.replay import ReplayCase, ReplayEnv
from reviewers.kernel.errors import LLMSchemaError, TrainingError

if TYPE_CHECKING:
    import torch
    import xgrammar as xgr

    from agent.llm.grammar import JsonSchemaGrammar
    from learning.strata.policy import StrategyPolicy


def case_schema(case: ReplayCase, env: ReplayEnv, *, decisions_only: bool) -> dict[str, Any]:
    """The strategy schema of one replayed merge request: its changed files, its enabled reviewers, and
    (decisions only) focus paths capped at its review budget."""
    cap = focus_path_cap(case.budget)
    return plan_schema(env.files(case), case.repo_config(), decisions_only=decisions_only, max_focus_paths=cap)


def _processor_class() -> type[Any]:
    import xgrammar as xgr
    from transformers import LogitsProcessor

    class PerRowSchemaProcessor(LogitsProcessor):  # type: ignore[misc]
        """Masks row r's next-token logits to what grammar r allows (one `generate` call)."""

        def __init__(self, compiled: Sequence[xgr.CompiledGrammar], *, vocab_size: int) -> None:
            self._matchers = [xgr.GrammarMatcher(g) for g in compiled]
            self._bitmask = xgr.allocate_token_bitmask(len(compiled), vocab_size)
            self._vocab_size = vocab_size
            self._started = False

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            if input_ids.shape[0] != len(self._matchers):
                raise LLMSchemaError(f"{input_ids.shape[0]} sequences for {len(self._matchers)} grammar matchers")
            if self._started:
                for row, matcher in enumerate(self._matchers):
                    if not matcher.is_terminated() and not matcher.accept_token(int(input_ids[row, -1])):
                        raise LLMSchemaError("the model produced a token its schema does not allow")
            self._started = True
            active = [row for row, m in enumerate(self._matchers) if not m.is_terminated()]
            for row in active:
                self._matchers[row].fill_next_token_bitmask(self._bitmask, row)
            if active:
                xgr.apply_token_bitmask_inplace(
                    scores, self._bitmask.to(scores.device), vocab_size=self._vocab_size, indices=active
                )
            return scores

    return PerRowSchemaProcessor


def make_grammar(policy: StrategyPolicy) -> JsonSchemaGrammar:
    """A grammar compiler for the policy's tokenizer (its model's vocabulary width)."""
    from agent.llm.grammar import JsonSchemaGrammar

    vocab = int(policy.model.config.vocab_size)
    return JsonSchemaGrammar(policy.tokenizer, vocab_size=vocab, stop_token_ids=policy.eos_ids)


class ConstrainedSampler:
    """A `StrategySampler` whose prompt i is decoded under `schemas[i]` (xgrammar, compact JSON).

    Two things keep it cheap on a CPU, neither changes what is sampled beyond float rounding: a LoRA
    adapter is merged into the weights while sampling (peft's unmerged forward runs three matmuls per
    adapted layer, and decoding is overhead-bound), and with `n > 1` each prompt is read once and its
    key/value cache copied to its `n` rows (`generate` would otherwise read it `n` times: on a few
    hundred prompt tokens and a few dozen answer tokens, reading the prompt is most of the work).
    """

    def __init__(
        self, policy: StrategyPolicy, grammar: JsonSchemaGrammar, schemas: Sequence[Mapping[str, Any]]
    ) -> None:
        self.policy = policy
        self.grammar = grammar
        self.schemas = list(schemas)

    def sample(
        self, prompts: Sequence[Sequence[int]], *, n: int, temperature: float, max_new_tokens: int, seed: int
    ) -> list[list[list[int]]]:
        if len(prompts) != len(self.schemas):
            raise TrainingError(f"{len(prompts)} prompts but {len(self.schemas)} schemas")
        compiled = [self.grammar.compile(s) for s in self.schemas]
        vocab = int(self.policy.model.config.vocab_size)
        with self.policy.decoding():
            if n == 1:
                processor = _processor_class()(compiled, vocab_size=vocab)
                return self.policy.sample(
                    prompts, n=1, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed,
                    logits_processors=[processor],
                )  # fmt: skip
            return [
                self._sample_shared_prompt(
                    prompt, grammar, n=n, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed + i
                )
                for i, (prompt, grammar) in enumerate(zip(prompts, compiled, strict=True))
            ]

    def _sample_shared_prompt(
        self, prompt: Sequence[int], grammar: Any, *, n: int, temperature: float, max_new_tokens: int, seed: int
    ) -> list[list[int]]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        policy = self.policy
        if temperature <= 0:
            raise TrainingError("greedy decoding gives one completion per prompt; use n=1")
        generation = GenerationConfig(  # type: ignore[no-untyped-call]
            max_new_tokens=max_new_tokens, eos_token_id=policy.eos_ids, pad_token_id=policy.pad_id,
            do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
        )  # fmt: skip
        processor = _processor_class()([grammar] * n, vocab_size=int(policy.model.config.vocab_size))
        ids = torch.tensor([list(prompt)], dtype=torch.long, device=policy.device)
        was_training = policy.model.training
        policy.model.eval()
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.manual_seed(seed)
                # The prompt but its last token goes into the cache once; generate() reads the last one.
                cache = policy.model(input_ids=ids[:, :-1], use_cache=True).past_key_values
                cache.batch_repeat_interleave(n)
                out = policy.model.generate(
                    input_ids=ids.repeat(n, 1),
                    attention_mask=torch.ones((n, ids.shape[1]), dtype=torch.long, device=policy.device),
                    cache=cache,
                    generation_config=generation,
                    logits_processor=LogitsProcessorList([processor]),
                )
        finally:
            policy.model.train(was_training)
        return [policy._trim(row[ids.shape[1] :].tolist()) for row in out]
