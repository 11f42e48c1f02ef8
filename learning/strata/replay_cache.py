"""A replay environment that remembers executions: the fixed executor is deterministic.

With the analyzers as the executor (`llm=None`), executing one strategy on one merge request always
gives the same findings, so an experiment that executes the same few plans again and again (every
RL step, every held-out evaluation) runs each (case, plan) once. A plan is keyed by its canonical
JSON; a model-driven execution (`llm` given) is never cached.
"""

from __future__ import annotations

from agent.strategy import Strategy
from learning.replay import Execution, ReplayCase, ReplayEnv, ReplayEnvConfig
from reviewers.kernel.contracts import LLMPort


class CachedReplayEnv(ReplayEnv):
    """`ReplayEnv` whose analyzer-only executions are memoised per (case id, strategy)."""

    def __init__(self, config: ReplayEnvConfig | None = None) -> None:
        super().__init__(config)
        self._executions: dict[tuple[str, str], Execution] = {}
        self.hits = 0
        self.misses = 0

    def execute(self, case: ReplayCase, z: Strategy, *, llm: LLMPort | None = None) -> Execution:
        if llm is not None:
            return super().execute(case, z, llm=llm)
        key = (case.case_id, z.to_json())
        cached = self._executions.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        execution = super().execute(case, z)
        self._executions[key] = execution
        return execution
