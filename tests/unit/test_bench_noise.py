"""The noise benchmark's merge requests: benign edits that keep the code valid, and MRs a real
repository could have (no unchanged module imports a file the MR adds)."""

from __future__ import annotations

import ast
import random

from agent.diff import parse_unified_diff
from bench.noise import add_docstring_line, add_logging_line, benign_edit, merge_requests, rename_local, swap_imports
from reviewers.analyzers.imports import ModuleIndex, imports_of

MODULE = """import os
import sys


def join_all(parts):
    result = []
    for part in parts:
        result.append(os.fspath(part))
    return sys.intern("/".join(result))
"""


def test_each_benign_edit_is_small_and_keeps_the_module_parsing() -> None:
    tree = ast.parse(MODULE)
    renamed = rename_local(MODULE, tree, random.Random(0))
    assert renamed is not None and "result_value = []" in renamed and "result = []" not in renamed
    documented = add_docstring_line(MODULE, tree, random.Random(0))
    assert documented is not None and '    """Join all."""\n    result = []' in documented
    logged = add_logging_line(MODULE, tree, random.Random(0))
    assert logged is not None and "import logging\n" in logged and 'debug("%s called", "join_all")' in logged
    swapped = swap_imports(MODULE, tree, random.Random(0))
    assert swapped is not None and swapped.startswith("import sys\nimport os\n")
    for text in (renamed, documented, logged, swapped):
        ast.parse(text)
    edited, names = benign_edit(MODULE, random.Random(3)) or ("", [])
    assert names and edited != MODULE and len(edited.splitlines()) - len(MODULE.splitlines()) <= 3


def test_merge_requests_from_an_installed_package_are_consistent() -> None:
    new, modified = merge_requests(("packaging",), seed=1)
    assert (new.kind, modified.kind) == ("new files", "modified files")
    added = [f for f in parse_unified_diff(new.diff) if f.status == "added"]
    assert len(added) == 3 and new.changed_lines == sum(f.additions for f in added)
    added_paths = {f.path for f in added}
    index = ModuleIndex(new.files)
    for path, text in new.files.items():
        if path not in added_paths:  # nothing left unchanged at head imports a module this MR adds
            assert not any(set(index.resolve(path, ref)) & added_paths for ref in imports_of(text, path)), path
    files = parse_unified_diff(modified.diff)
    assert files and all(f.status == "modified" for f in files) and modified.edits
    assert modified.changed_lines == sum(f.additions for f in files) and modified.changed_lines < 20
