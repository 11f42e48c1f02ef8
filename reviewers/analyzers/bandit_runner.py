"""bandit, reading Python of any version: the same reading `reviewers.analyzers.pysyntax` gives every analyzer.

bandit parses each file with the running interpreter's `ast.parse` (bandit/core/node_visitor.py), so
on the 3.11 service it skipped every file using 3.12 syntax ("syntax error while parsing AST from
file") — its findings on such a file were lost without a word. Run as
`python -I bandit_runner.py <bandit arguments>`, this gives bandit's node visitor a `parse` that
first asks `ast` and, when it refuses, reads the text with `downlevel` (libcst, then the line-for-line
rewrite and the splice). bandit's tree then matches the other analyzers' line for line, while its
`# nosec` comments and code snippets still come from the real file. Drop it when the service runs
on an interpreter as new as the code it reviews, or when bandit reads newer syntax itself.

It runs inside bandit's own short-lived process, so libcst runs in-process here: the service has
already read the same text in its isolated converter before asking bandit (a file it could not read
goes to no tree rule and no bandit), and a crash here is bandit's failure, reported as such.
Standard library only, loaded by path: the `-I` process sees neither PYTHONPATH nor this package.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
import warnings
from pathlib import Path
from typing import Any

_DOWNLEVEL = Path(__file__).with_name("downlevel.py")


def _downlevel_module() -> Any:
    spec = importlib.util.spec_from_file_location("reviewloop_downlevel", _DOWNLEVEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def parse_any_version(source: str | bytes, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    """`ast.parse`, falling back to the line-preserving down-level for newer syntax."""
    try:
        return ast.parse(source, filename, mode, **kwargs)
    except SyntaxError as exc:
        if mode != "exec":
            raise
        refused = exc
    text = importlib.util.decode_source(source) if isinstance(source, bytes) else source
    downlevel = _downlevel_module()
    try:
        converted = downlevel.downlevel(text)
    except downlevel.DownlevelError:
        raise refused from None  # bandit reports a file no version reads as a syntax error, as before
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(converted["text"], filename, mode, **kwargs)
    return downlevel.splice(tree, converted)


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
