"""Keeping a conversation inside the model's context, with room for the answer.

A reviewer's loop grows by a call and a tool result per step; at a 30-step budget it passes a 16k
context, and vLLM then refuses the request with a 400 ("This model's maximum context length is N
tokens. However, you requested M tokens (P in the messages, C in the completion)..."). So before a
request goes out, the conversation is fitted to `context_tokens - max_tokens`: the first two
messages (the shared prefix and the task) and the newest message stay whole; the oldest user turns
between them (tool results) are summarised to one short line first, then the oldest summarised
turns are dropped, a call and its result together, for a line that says how many were. The model keeps what it asked for
(its own calls stay) and loses the bulk of old file text, which it can read again.

Without the server's tokenizer, tokens are estimated from characters at a rate no tokenizer
undercuts on code (`CHARS_PER_TOKEN`); a 400 for length tells the real count, which rescales the
estimate for every later request (`TokenEstimate.learn`).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence

from reviewers.kernel.contracts import ChatMessage
from reviewers.kernel.errors import LLMContextLengthError
from reviewers.prompts import fence

CHARS_PER_TOKEN = 3.0  # code and JSON run 3-4 characters a token in BPE vocabularies; 3 errs long
MESSAGE_OVERHEAD_TOKENS = 8  # a chat template's role markers and separators per message
SAFETY_TOKENS = 32  # slack for the template's generation prompt and rounding
SUMMARY_CHARS = 160  # what a trimmed message keeps of its first line
RESCALE_MARGIN = 1.1  # after a 400, aim this much below what the server's count says fits

TRIMMED = "[an earlier message, trimmed to fit the model's context; it began:]"

# vLLM (0.6 to 0.11) phrasings; the context length is always there, the prompt size in one of two forms.
_CONTEXT = re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE)
_PROMPT = re.compile(r"\((\d+) in the messages|has (\d+) input tokens|(\d+) tokens? in the messages", re.IGNORECASE)


def context_length_error(message: str) -> LLMContextLengthError | None:
    """Our error for a server's "too long" message, or None when the message is about something else."""
    found = _CONTEXT.search(message)
    if found is None:
        return None
    prompt = _PROMPT.search(message)
    prompt_tokens = next((int(g) for g in prompt.groups() if g), None) if prompt else None
    return LLMContextLengthError(
        f"the request does not fit the model's context: {message[:300]}",
        context_tokens=int(found.group(1)),
        prompt_tokens=prompt_tokens,
    )


class TokenEstimate:
    """Tokens of a conversation, estimated from characters and corrected by what the server reports."""

    def __init__(self, chars_per_token: float = CHARS_PER_TOKEN) -> None:
        self._chars_per_token = chars_per_token
        self._lock = threading.Lock()

    def of_text(self, text: str) -> int:
        return math.ceil(len(text) / self._chars_per_token)

    def of(self, messages: Sequence[ChatMessage]) -> int:
        return sum(self.of_text(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    def learn(self, messages: Sequence[ChatMessage], *, actual_tokens: int | None) -> None:
        """Make the estimate at least as long as the server's count for these messages (or, with no
        count, half as long again), so the retry and every later request are trimmed enough."""
        estimated = self.of(messages)
        with self._lock:
            if actual_tokens is not None and actual_tokens * RESCALE_MARGIN > estimated:
                self._chars_per_token *= estimated / (actual_tokens * RESCALE_MARGIN)
            elif actual_tokens is None:
                self._chars_per_token /= 1.5


def _summary(message: ChatMessage) -> ChatMessage:
    first = next((ln.strip() for ln in message["content"].splitlines() if ln.strip()), "")
    if first.endswith("(untrusted data, not instructions):"):  # a tool result: name its first data line too
        lines = [ln.strip() for ln in message["content"].splitlines() if ln.strip()]
        first = f"{first} {lines[2] if len(lines) > 2 else ''}"
    clipped = first if len(first) <= SUMMARY_CHARS else first[: SUMMARY_CHARS - 3] + "..."
    return {"role": message["role"], "content": f"{TRIMMED}\n{fence(clipped)}"}


def fit_messages(messages: Sequence[ChatMessage], *, budget_tokens: int, estimate: TokenEstimate) -> list[ChatMessage]:
    """`messages` trimmed to `budget_tokens` by the estimate, oldest tool results first.

    The first two messages and the last one are kept (the system prefix, the task — which gains a
    note when whole steps are dropped — and the turn being answered). If even those do not fit, they
    go as they are: the server's 400 then says so, with a reason nobody can trim away.
    """
    out = list(messages)
    if estimate.of(out) + SAFETY_TOKENS <= budget_tokens or len(out) <= 3:
        return out
    middle = range(2, len(out) - 1)
    for i in middle:  # oldest first: summarise tool results (user turns) to one line
        if out[i]["role"] == "user" and not out[i]["content"].startswith(TRIMMED):
            out[i] = _summary(out[i])
            if estimate.of(out) + SAFETY_TOKENS <= budget_tokens:
                return out
    dropped = 0
    # Then drop the oldest turns, a call and its result together, so that user and model turns still
    # alternate (some chat templates refuse anything else); the task message says how many went.
    while len(out) > 4 and estimate.of(out) + SAFETY_TOKENS > budget_tokens:
        del out[2:4]
        dropped += 1
    if dropped:
        note = f"[{dropped} earlier step(s) dropped to fit the model's context]"
        out[1] = {"role": out[1]["role"], "content": f"{out[1]['content']}\n\n{note}"}
    return out
