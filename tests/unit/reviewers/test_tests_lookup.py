"""Which test files name a module: the dotted name, or the file stem with its package; a package of
the same name as the stem is another module."""

from __future__ import annotations

from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.analyzers.tests_lookup import TestIndex, names_module


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
