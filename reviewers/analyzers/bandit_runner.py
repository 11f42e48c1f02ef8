"""bandit, reading Python of any version: the same reading `reviewers.analyzers.pysyntax` gives every analyzer.

bandit parses each file with the running interpreter's `ast.parse` (bandit/core/node_visitor.py), so
on the 3.11 service it skipped every file using 3.12 syntax ("syntax error while parsing AST from
file") — its findings on such a file were lost without a word. Run as
`python -I bandit_runner.py <bandit arguments>`, this gives bandit's node visitor a `parse` that
first asks `ast` and, when it refuses, takes the conversion the service's reader already made of that
text (`bandit.py` writes them to a file named by `CONVERSIONS_ENV`, keyed by the text's sha256), parses
it and splices the strings back (`downlevel.splice`). bandit's tree then matches the other analyzers'
line for line, while its `# nosec` comments and code snippets still come from the real file.

libcst never runs in bandit's process: a hostile text that would crash or stall it has already been
refused by the reader's isolated child, and bandit reports such a file as a syntax error, as it
always did. Standard library only, `downlevel.py` loaded by path: the `-I` process sees neither
PYTHONPATH nor this package. Drop it when the service runs on an interpreter as new as the code it
reviews, or when bandit reads newer syntax itself.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Any

CONVERSIONS_ENV = "REVIEWLOOP_BANDIT_CONVERSIONS"
_DOWNLEVEL = Path(__file__).with_name("downlevel.py")


@functools.cache
def _downlevel_module() -> Any:
    spec = importlib.util.spec_from_file_location("reviewloop_downlevel", _DOWNLEVEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@functools.cache
def _conversions() -> dict[str, Any]:
    table = os.environ.get(CONVERSIONS_ENV)
    if not table:
        return {}
    loaded = json.loads(Path(table).read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else {}


def parse_any_version(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    """`ast.parse`, or, for a text the service's reader converted, the tree it reads."""
    try:
        return ast.parse(source, filename, mode, **kwargs)
    except SyntaxError as exc:
        raw = source if isinstance(source, bytes) else source.encode("utf-8")
        converted = _conversions().get(hashlib.sha256(raw).hexdigest()) if mode == "exec" else None
        if converted is None:
            raise
        refused = exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(converted["text"], filename, mode, **kwargs)
        return _downlevel_module().splice(tree, converted)
    except (SyntaxError, ValueError):
        raise refused from None


def main() -> None:
    from bandit.core import node_visitor

    reader = types.ModuleType("ast")
    reader.__dict__.update(vars(ast))
    reader.parse = parse_any_version  # type: ignore[attr-defined]
    node_visitor.ast = reader  # type: ignore[attr-defined]
    from bandit.cli.main import main as bandit_main

    sys.argv = ["bandit", *sys.argv[1:]]
    bandit_main()


if __name__ == "__main__":
    main()
