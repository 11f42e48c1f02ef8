"""Compile time of the review's decoding schemas in process: string bounds held outside the grammar
(`agent.llm.grammar`, what the in-process backend does) against xgrammar compiling `maxLength`.

    python scripts/grammar_compile_timing.py MODEL_DIR

MODEL_DIR is a model directory with a tokenizer, e.g. what `reviewloop dev base-model` prints. The
schemas are the judgment, a reviewer's tool call over two files and a strategy over three.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from agent.llm.grammar import COMPACT_SEPARATORS, JsonSchemaGrammar
from agent.llm.structured import decoding_schema
from agent.strategy_schema import strategy_json_schema
from agent.verdicts.judge import ModelJudgment
from reviewers.tool_schema import tool_call_json_schema


def main(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vocab_size = int(AutoConfig.from_pretrained(model_dir).vocab_size)
    grammar = JsonSchemaGrammar(tokenizer, vocab_size=vocab_size, stop_token_ids=[tokenizer.eos_token_id])
    schemas = {
        "judgment": decoding_schema(ModelJudgment, keep_length_bounds=True),
        "tool call": tool_call_json_schema(paths=["app/a.py", "app/b.py"]),
        "strategy": strategy_json_schema(["app/a.py", "app/b.py", "tests/test_a.py"]),
    }
    for name, schema in schemas.items():
        started = time.perf_counter()
        grammar.compile(schema)
        outside = time.perf_counter() - started
        started = time.perf_counter()
        grammar._compiler.compile_json_schema(  # noqa: SLF001 - the same compiler, bounds in the grammar
            json.dumps(schema), any_whitespace=False, separators=COMPACT_SEPARATORS, strict_mode=True
        )
        inside = time.perf_counter() - started
        print(f"{name}: bounds outside the grammar {outside:.3f} s; xgrammar maxLength {inside:.2f} s", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
