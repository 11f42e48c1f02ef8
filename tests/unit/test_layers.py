"""The layers import one way: api → learning → agent → reviewers.

Every module of every layer is read as source (its AST, so imports inside functions and under
`TYPE_CHECKING` count too) and no module may import a layer above its own. A module that needs
something from a higher layer takes it as an argument (a port), never as an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("reviewers", "agent", "learning", "api")  # bottom to top


def imported_packages(source: str) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a module's source."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return sorted(found)


def upward_imports(layer: str) -> list[str]:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    return [
        f"{path.relative_to(ROOT)}:{line} imports {package}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for line, package in imported_packages(path.read_text(encoding="utf-8"))
        if package in above
    ]


@pytest.mark.parametrize("layer", LAYERS)
def test_no_module_imports_a_higher_layer(layer: str) -> None:
    assert len(list((ROOT / layer).rglob("*.py"))) >= 5, f"{layer}/ has no modules here: the test would check nothing"
    assert upward_imports(layer) == []


def test_the_import_reader_sees_every_kind_of_import() -> None:
    source = (
        "import api.app\n"
        "from learning import gate\n"
        "from . import sibling\n"
        "def f():\n"
        "    from agent.pipeline import run_review\n"
        "if TYPE_CHECKING:\n"
        "    import reviewers.kernel.errors as errors\n"
    )
    assert imported_packages(source) == [(1, "api"), (2, "learning"), (5, "agent"), (7, "reviewers")]
