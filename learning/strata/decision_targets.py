"""A target plan as the policy writes it, and the decisions in it (issue 41: SFT loss on decisions only).

Under a merge request's decisions-only schema most of a plan's tokens are forced by the grammar, and
jump-forward decoding (`agent.llm.jump_forward`) appends each forced string as the tokenizer splits it
alone, not as it splits the whole plan. Training on `tokenizer(plan)` would then teach the model
token contexts it never meets when it decodes, and put most of the loss on tokens it cannot choose.
`replay` walks the grammar over a target plan the way the decoder does: at each point where the
grammar leaves a choice, the longest allowed token the plan continues with (a decision, with the
allowed set kept for a loss renormalised over it), then the forced string, tokenized as the decoder
tokenizes it. The result is the token sequence greedy jump-forward decoding writes when the model
makes the target's choices, and the positions of those choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    import xgrammar as xgr


@dataclass(frozen=True)
class DecisionTarget:
    """A completion as jump-forward decoding writes it, its decision positions and allowed sets."""

    tokens: tuple[int, ...]
    decisions: tuple[int, ...]  # indices into `tokens` where the grammar allowed more than one token
    allowed: tuple[tuple[int, ...], ...]  # the allowed token ids at each decision


def allowed_ids(matcher: xgr.GrammarMatcher, bitmask: torch.Tensor, vocab_size: int) -> list[int]:
    import torch
    import xgrammar as xgr

    matcher.fill_next_token_bitmask(bitmask, 0)
    scores = torch.zeros((1, vocab_size), dtype=torch.float32)
    xgr.apply_token_bitmask_inplace(scores, bitmask, vocab_size=vocab_size)
    return [int(i) for i in torch.nonzero(scores[0] == 0).flatten().tolist()]


def replay(
    text: str,
    grammar: xgr.CompiledGrammar,
    *,
    tokenizer: Any,
    token_bytes: Sequence[bytes],
    vocab_size: int,
    eos_ids: Sequence[int],
    max_tokens: int = 512,
) -> DecisionTarget | None:
    """`text` written under `grammar` as the jump-forward decoder writes it (None: the grammar refuses
    it, or no allowed token continues it)."""
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(grammar)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    rest = text.encode("utf-8")
    tokens: list[int] = []
    decisions: list[int] = []
    allowed: list[tuple[int, ...]] = []
    eos = set(int(t) for t in eos_ids)
    while len(tokens) < max_tokens and not matcher.is_terminated():
        ids = allowed_ids(matcher, bitmask, vocab_size)
        if rest:
            fits = [i for i in ids if i not in eos and token_bytes[i] and rest.startswith(token_bytes[i])]
            if not fits:
                return None
            token = max(fits, key=lambda i: (len(token_bytes[i]), -i))
        else:
            ends = [i for i in ids if i in eos]
            if not ends:
                return None
            token = ends[0]
        if len(ids) > 1:
            decisions.append(len(tokens))
            allowed.append(tuple(ids))
        if not matcher.accept_token(token):
            return None
        tokens.append(token)
        rest = rest[len(token_bytes[token]) :] if token not in eos else rest
        if token in eos or matcher.is_terminated():
            break
        jump = matcher.find_jump_forward_string()
        if jump:
            for piece in tokenizer(jump, add_special_tokens=False)["input_ids"]:
                piece = int(piece)
                if not rest.startswith(token_bytes[piece]) or not matcher.accept_token(piece):
                    break  # the decoder lets the model decide from here too
                tokens.append(piece)
                rest = rest[len(token_bytes[piece]) :]
    if rest:
        return None
    return DecisionTarget(tuple(tokens), tuple(decisions), tuple(allowed))


def vocabulary_bytes(tokenizer: Any, *, vocab_size: int, eos_ids: Sequence[int]) -> list[bytes]:
    """Each token id's bytes as the grammar sees them (xgrammar's decoded vocabulary), padded to the
    model's vocabulary width."""
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=list(eos_ids))
    out = [bytes(b) if isinstance(b, bytes | bytearray) else str(b).encode("utf-8") for b in info.decoded_vocab]
    return out + [b""] * (vocab_size - len(out))
