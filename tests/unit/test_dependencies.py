"""Every third-party import the product makes is a declared distribution (issue 21, item 11).

`agent/agreement.py` imported numpy, which pyproject.toml did not declare: a plain `pip install`
could not run `reviewloop review`. Here every import in the product packages is mapped to the
distribution that provides it (`importlib.metadata`, down to the file for namespace packages such
as `opentelemetry`) and checked against pyproject's dependencies and extras; what the modules import
as they load, outside the training and model-serving code, must be a dependency, not an extra.
scripts/check_plain_install.sh proves the same in a fresh virtualenv.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "reviewers", "api", "learning")
NOT_PRODUCT = ("agent/demo_repo",)  # the demo's repository, reviewed as data, never imported
# Modules whose module-level imports may need the train or gpu extra: they are imported only by the
# training commands and the in-process model, never on the way to `reviewloop review` without a model.
EXTRA_ONLY_MODULES = ("learning/", "agent/llm/grammar.py")


@dataclass(frozen=True)
class Import:
    module: str
    path: str  # relative to the repository
    line: int
    at_load: bool  # a module-level import (not in a function, not under TYPE_CHECKING)


def imports_in(path: Path, *, rel: str) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def visit(node: ast.AST, at_load: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                yield from (Import(alias.name, rel, child.lineno, at_load) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield Import(child.module, rel, child.lineno, at_load)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from visit(child, False)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from visit(child, False)
            else:
                yield from visit(child, at_load)

    yield from visit(tree, True)


def product_imports() -> list[Import]:
    found = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(NOT_PRODUCT):
                continue
            found += [
                i
                for i in imports_in(path, rel=rel)
                if (top := i.module.partition(".")[0]) not in sys.stdlib_module_names
                and top not in PRODUCT
                and top != "__future__"
            ]
    return found


@cache
def packages_distributions() -> dict[str, list[str]]:
    return md.packages_distributions()


@cache
def modules_of(distribution: str) -> frozenset[str]:
    """Every dotted module path (packages and `.py` modules) a distribution's files hold."""
    out = set()
    for f in md.distribution(distribution).files or ():
        parts = f.parts
        if parts and parts[-1].endswith(".py"):
            stem = [*parts[:-1], parts[-1].removesuffix(".py")]
            out.update(".".join(stem[:n]) for n in range(1, len(stem) + 1))
    return frozenset(out)


def distributions_providing(module: str) -> set[str]:
    """The installed distributions that hold `module`'s code, by the longest dotted prefix that one
    of them holds (a namespace such as `opentelemetry` is split over a dozen); by its name when none
    is installed (the gpu extra's vllm, say)."""
    top = module.partition(".")[0]
    candidates = set(packages_distributions().get(top, []))
    if len(candidates) <= 1:
        return {canonicalize_name(c) for c in candidates} or {canonicalize_name(top)}
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        stem = ".".join(parts[:depth])
        holders = {canonicalize_name(c) for c in candidates if stem in modules_of(c)}
        if holders:
            return holders
    return {canonicalize_name(c) for c in candidates}


def declared() -> tuple[set[str], set[str]]:
    """(the dependencies, the extras' requirements), canonical names, each with what the extras it
    names bring (`psycopg[pool]` declares psycopg-pool)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        out = set()
        for text in requirements:
            req = Requirement(text)
            out.add(canonicalize_name(req.name))
            for extra in req.extras:
                for sub in md.requires(req.name) or ():
                    brought = Requirement(sub)
                    if brought.marker is not None and brought.marker.evaluate({"extra": extra}):
                        out.add(canonicalize_name(brought.name))
        return out

    core = names(project["dependencies"])
    extras = set().union(*(names(reqs) for reqs in project["optional-dependencies"].values()))
    return core, extras


def undeclared(imports: list[Import], allowed: set[str]) -> list[str]:
    return sorted(
        f"{i.path}:{i.line} imports {i.module} ({' or '.join(sorted(dists))})"
        for i in imports
        if not (dists := distributions_providing(i.module)) & allowed
    )


def test_every_product_import_is_a_declared_distribution() -> None:
    core, extras = declared()
    imports = product_imports()
    assert len(imports) > 100, "the walk found almost no imports: it is broken"
    missing = undeclared(imports, core | extras)
    assert not missing, "\n".join(missing)


def test_what_the_review_path_loads_needs_no_extra() -> None:
    core, _ = declared()
    at_load = [i for i in product_imports() if i.at_load and not i.path.startswith(EXTRA_ONLY_MODULES)]
    missing = undeclared(at_load, core)
    assert not missing, "\n".join(missing)


def test_the_check_sees_an_undeclared_import_and_a_namespace_package(tmp_path: Path) -> None:
    # numpy unpinned is the issue's own case; the OTLP exporter lives in `opentelemetry`, beside
    # a dozen other distributions, and must resolve to its own
    assert distributions_providing("numpy") == {"numpy"}
    assert distributions_providing("opentelemetry.exporter.otlp.proto.http.trace_exporter") == {
        "opentelemetry-exporter-otlp-proto-http"
    }
    assert distributions_providing("opentelemetry.sdk.trace") == {"opentelemetry-sdk"}
    assert undeclared([Import("numpy", "agent/agreement.py", 30, True)], {"pydantic"}) == [
        "agent/agreement.py:30 imports numpy (numpy)"
    ]
    module = tmp_path / "m.py"
    module.write_text(
        "import numpy\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
        "def f():\n    import transformers\n"
    )
    found = {(i.module, i.at_load) for i in imports_in(module, rel="m.py")}
    assert found == {("numpy", True), ("typing", True), ("torch", False), ("transformers", False)}
