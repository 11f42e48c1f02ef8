"""What agent/ and learning/ may ask of a model beyond the reviewers' `LLMPort`.

StraTA samples several strategy candidates per merge request; both backends serve that from one
request (vLLM's `n`, transformers' `num_return_sequences`), so it is a method rather than a loop of
`complete_text` calls. With a `json_schema` every sample is decoded under it, as `complete_json` is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from reviewers.kernel.contracts import ChatMessage, LLMPort

ProviderName = Literal["openai", "vllm", "transformers"]


class SamplingLLM(LLMPort, Protocol):
    """An `LLMPort` that can also draw `n` independent sampled completions of one prompt."""

    def sample_texts(
        self,
        messages: Sequence[ChatMessage],
        *,
        n: int,
        temperature: float,
        max_tokens: int,
        purpose: str = "sample",
        json_schema: Mapping[str, Any] | None = None,
    ) -> list[str]: ...
