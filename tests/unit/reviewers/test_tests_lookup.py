"""Which test files name a module: the dotted name, or the file stem with its package; a package of
the same name as the stem is another module."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from agent.gitrepo import open_repository
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.analyzers.tests_lookup import PREFETCH_CHUNK, TestIndex, names_module


def test_a_stem_counts_only_beside_its_package() -> None:
    path = "bench/learning.py"
    assert names_module("from bench.learning import main\n", path)
    assert names_module("from bench import learning\nlearning.main([])\n", path)
    # `learning` here is the top-level package learning/, not bench/learning.py
    assert not names_module("from learning.tiny_model import build_tiny_model\n", path)
    assert names_module("import orders\n", "orders.py")  # a top-level module: the stem is its name
    assert names_module("import { total } from '../src/cart'\n", "src/cart.ts")


def test_a_generic_symbol_is_not_traced_through_a_package_named_like_the_module() -> None:
    workspace = SnapshotWorkspace(
        {
            "bench/learning.py": "def generate():\n    return 1\n",
            "learning/tiny_model.py": "def generate():\n    return 2\n",
            "tests/test_tiny.py": "from learning.tiny_model import generate\n\ndef test_generate():\n    generate()\n",
            "tests/test_bench.py": "from bench import learning\n\ndef test_bench():\n    learning.generate()\n",
        }
    )
    refs = TestIndex(workspace).references("bench/learning.py", "generate")
    assert [(r.path, r.tests) for r in refs] == [("tests/test_bench.py", ("test_bench",))]


def test_data_under_a_tests_folder_is_not_read_as_tests() -> None:
    story = '{"cases": [{"header_table_size": 4096, "encode_headers": "HeaderTable.search"}]}\n'
    workspace = SnapshotWorkspace(
        {
            "hpack/table.py": "class HeaderTable:\n    def search(self):\n        return None\n",
            "tests/test_fixtures/story_30.json": story,
            "tests/cases/table.yaml": "- HeaderTable: search\n",
            "tests/test_table.py": "from hpack.table import HeaderTable\n\ndef test_search():\n    HeaderTable().search()\n",
        }
    )
    index = TestIndex(workspace)
    assert index.paths == ["tests/test_table.py"]
    refs = index.references("hpack/table.py", "HeaderTable")
    assert [(r.path, r.tests) for r in refs] == [("tests/test_table.py", ("test_search",))]


def _committed(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    for args in (("init", "-q", "-b", "main"), ("add", "-A"), ("commit", "-q", "-m", "base")):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return repo


def test_test_files_of_a_git_repository_are_read_in_chunks_not_one_process_each(tmp_path: Path) -> None:
    """A repository with hundreds of test files: one `git cat-file --batch` per chunk, not a `git
    cat-file blob` per file (which cost a 400-test-file repository 7 of its 10 seconds a review)."""
    count = PREFETCH_CHUNK + 36
    files = {
        f"tests/test_{i}.py": f"from shop import cart\n\ndef test_{i}():\n    cart.total({i})\n" for i in range(count)
    }
    files["shop/cart.py"] = "def total(x):\n    return x\n"
    repo = open_repository(_committed(tmp_path, files))
    workspace = repo.workspace("HEAD")
    calls: list[tuple[str, ...]] = []
    real = repo._git

    def counted(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(args)
        return real(*args, **kwargs)

    repo._git = counted  # type: ignore[method-assign]
    refs = TestIndex(workspace).tests_for_path("shop/cart.py", ["total"])
    assert len(refs) == count and all(r.tests == ("total",) for r in refs)
    reads = [c for c in calls if c[0] == "cat-file"]
    assert len(reads) == 2 and all(c[1] == "--batch" for c in reads)


def test_the_deadline_is_asked_between_chunks_of_a_git_repository(tmp_path: Path) -> None:
    files = {
        f"tests/test_{i}.py": f"import cart\n\ndef test_{i}():\n    cart.go()\n" for i in range(PREFETCH_CHUNK + 5)
    }
    workspace = open_repository(_committed(tmp_path, files)).workspace("HEAD")
    asked = iter([False] * PREFETCH_CHUNK + [True] * 10)
    index = TestIndex(workspace, should_stop=lambda: next(asked))
    index.tests_for_path("cart.py", ["go"])
    assert index.stopped
    assert sum(1 for t in index._texts.values() if t is not None) == PREFETCH_CHUNK
