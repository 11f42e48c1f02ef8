"""A tiny causal language model built from a config, for tests and CPU development.

No model hub is reachable here, so tests cannot download even the smallest real model. Instead we
train a byte-level BPE tokenizer on the fly on a small built-in corpus (JSON, code, review prose),
give it a ChatML chat template, initialise a Qwen2-architecture model with seeded random weights
and save both with `save_pretrained`. The result loads offline with
`AutoModelForCausalLM.from_pretrained(path)` / `AutoTokenizer.from_pretrained(path)` and goes
through every code path a real model does (chat template, generation, LoRA, TRL trainers, vLLM on a
GPU), it just says nothing sensible.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config

from reviewers.kernel.errors import TrainingError

PAD_TOKEN = "<|endoftext|>"  # noqa: S105 (a tokenizer token, not a secret)
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)

# ChatML as Qwen models use it. The `{% generation %}` markers let TRL compute an assistant-only
# loss mask (`return_assistant_tokens_mask`); they render to nothing.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\n' }}"
    "{%- generation -%}{{ message['content'] + '<|im_end|>' }}{%- endgeneration -%}"
    "{{ '\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)

# Long enough for a strategy prompt with a schema instruction; small enough that the position
# embeddings of the tiny model stay negligible.
MAX_POSITION_EMBEDDINGS = 4096

# The smallest byte-level vocabulary: 256 byte symbols plus the special tokens, with room for merges.
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS) + 16

BUILTIN_CORPUS: tuple[str, ...] = (
    '{"change_type": "feature", "risk_areas": [{"path": "app/auth.py", "why": "token comparison"}]}',
    '{"reviewer": "security", "focus_paths": ["api/routes.py"], "checks": "input validation", "step_budget": 6}',
    '{"path": "src/db.py", "line": 42, "end_line": 44, "severity": "high", "category": "security"}',
    '{"verdict": "REAL", "reason": "the evidence is on a changed line"}',
    '{"title": "Unbounded retry loop", "body": "The loop never backs off.", "evidence": "while True:"}',
    '{"stop_condition": "all planned reviewers finished", "plan": [], "tool": "read_file", "args": {}}',
    "def load_config(path: str) -> dict[str, object]:\n"
    "    with open(path) as handle:\n        return json.load(handle)\n",
    "class UserRepository:\n    def __init__(self, conn):\n        self.conn = conn\n\n"
    "    def find(self, user_id):\n"
    "        return self.conn.execute('SELECT * FROM users WHERE id = %s', (user_id,)).fetchone()\n",
    "import subprocess\n\nsubprocess.run(cmd, shell=True, check=False)\n",
    "for item in items:\n    if item is None:\n        continue\n    total += item.price * item.quantity\n",
    "def test_parse_empty_diff():\n    assert parse_diff('') == []\n",
    "async function fetchUser(id) {\n  const res = await fetch(`/api/users/${id}`);\n  return res.json();\n}\n",
    "@@ -10,7 +10,9 @@ def handler(request):\n-    token = request.args['token']\n"
    "+    token = request.headers.get('X-Token')\n",
    "This change adds a new endpoint without tests. Consider covering the error path as well.",
    "The secret is compared with == which leaks timing; use hmac.compare_digest instead.",
    "Risk areas: authentication, database queries, error handling. Review security first, then tests.",
    "Looks good to me. Nit: the variable name could be clearer. The function is doing too much.",
    "Refactor: split the module into a parser and a renderer; the renderer should not import the store.",
    "Docs-only change: README wording and a typo fix. No reviewers needed.",
    "system user assistant change type risk areas reviewer plan focus paths checks step budget stop",
)


def _train_tokenizer(texts: list[str], *, vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def build_tiny_tokenizer(*, corpus: Iterable[str] | None = None, vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with a ChatML chat template, trained on the built-in corpus (+ `corpus`)."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise TrainingError(f"vocab_size must be at least {MIN_VOCAB_SIZE} for a byte-level BPE, got {vocab_size}")
    texts = list(BUILTIN_CORPUS) + [t for t in (corpus or ()) if t]
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=_train_tokenizer(texts, vocab_size=vocab_size),
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        bos_token=None,
        model_max_length=MAX_POSITION_EMBEDDINGS,
        padding_side="left",  # decoder-only batched generation pads on the left
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _special_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(token_id, int):
        raise TrainingError(f"the tokenizer has no id for {token}")
    return token_id


def build_tiny_model(
    out_dir: Path,
    *,
    seed: int = 0,
    corpus: Iterable[str] | None = None,
    vocab_size: int = 512,
    hidden_size: int = 64,
    layers: int = 2,
) -> Path:
    """Build and save a tiny randomly initialised causal LM and its tokenizer into `out_dir`.

    The same arguments give the same weights and the same tokenizer. Returns `out_dir`.
    """
    heads = 4
    if hidden_size < heads * 2 or hidden_size % heads:
        raise TrainingError(f"hidden_size must be a positive multiple of {heads} (≥ {heads * 2}), got {hidden_size}")
    if layers < 1:
        raise TrainingError(f"layers must be at least 1, got {layers}")
    tokenizer = build_tiny_tokenizer(corpus=corpus, vocab_size=vocab_size)
    eos_id = _special_id(tokenizer, IM_END)
    pad_id = _special_id(tokenizer, PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        max_window_layers=layers,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    # Seed a private generator state: weight init draws from torch's global RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False, max_new_tokens=64
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
