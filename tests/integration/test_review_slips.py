"""Issue 39, build item 5: the slips a change writes, through `reviewloop review` on a local git range.

Each rule fires on the slip the head commit writes and stays silent on its near miss beside it, and
on a slip that was already at the base. The broken-as-written slips are posted (REAL); a mutated
default and a ReDoS are listed for a person (NEEDS_HUMAN_REVIEW); a caller left broken by a changed
signature or a removed name is posted, at the caller where the diff shows it, else at the definition."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from api.cli import app


@pytest.fixture
def env(db_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIEWLOOP_DATABASE_URL", db_dsn)
    monkeypatch.setenv("REVIEWLOOP_DATA_DIR", str(tmp_path / "data"))
    for name in ("REVIEWLOOP_LLM_BASE_URL", "REVIEWLOOP_LLM_MODEL", "REVIEWLOOP_LLM_MODEL_PATH"):
        monkeypatch.delenv(name, raising=False)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def commit_range(repo: Path, base: dict[str, str], head: dict[str, str]) -> None:
    """A repository whose `base` tag holds `base` and whose `head` tag holds `head`."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.org")
    git(repo, "config", "user.name", "Dev")
    for files, tag in ((base, "base"), (head, "head")):
        for path in {*base, *head} - set(files):
            (repo / path).unlink(missing_ok=True)
        for path, text in files.items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text, encoding="utf-8")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", tag)
        git(repo, "tag", tag)


def review(repo: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(app, ["review", str(repo), "--base", "base", "--head", "head", "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    findings: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
    return findings


BASE = {
    "shop/media.py": '"""Media types."""\n\nOLD = ["a/b" "c/d"]\n',
    "shop/search.py": "from loguru import logger\n\n\ndef search(query):\n    return []\n",
    "shop/sizes.py": "def check(size, limit):\n    return size <= limit\n",
    "shop/cart.py": "def add(item, into=None):\n    return [item]\n",
}
HEAD = {
    "shop/media.py": '"""Media types."""\n\nOLD = ["a/b" "c/d"]\n\n'
    'TYPES = [\n    "image/png",\n    "image/jpeg"\n    "image/gif",\n    "image/webp",\n]\n'
    'HELP = [\n    "--verbose",\n    "Print every step of the run, with the time each "\n    "one took.",\n]\n',
    "shop/search.py": "from loguru import logger\n\n\ndef search(query):\n"
    '    logger.error("query:", query)\n    logger.info("query: {}", query)\n    return []\n',
    "shop/sizes.py": "def check(size, limit, items, other):\n    if size < 0:\n        ValueError('negative')\n"
    "    if limit is None:\n        raise ValueError('no limit')\n"
    "    if len(items) >= 0 and len(items) > 0:\n        return size <= limit\n"
    "    if other != other:\n        return False\n    return True\n",
    "shop/cart.py": "def add(item, into=[]):\n    into.append(item)\n    return into\n\n\n"
    "def read(names=[]):\n    return list(names)\n",
}


def test_each_slip_fires_on_the_change_and_not_on_its_near_miss(env: None, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    commit_range(repo, BASE, HEAD)
    found = {(f["path"], f["line"], f["rule"]): f for f in review(repo)}
    slips = {k for k in found if k[2].startswith("slips:")}
    assert slips == {
        ("shop/media.py", 7, "slips:missing-comma"),  # not the wrapped help text, not OLD (at the base already)
        ("shop/search.py", 5, "slips:logging-args"),  # not the call whose `{}` takes its argument
        ("shop/sizes.py", 3, "slips:unraised-exception"),  # not the `raise ValueError` below
        ("shop/sizes.py", 6, "slips:constant-comparison"),  # not `other != other`, the NaN test
        ("shop/cart.py", 1, "slips:mutated-default"),  # not `read`, whose default is never changed
    }
    for key in slips - {("shop/cart.py", 1, "slips:mutated-default")}:
        assert found[key]["verdict"] == "REAL", found[key]  # broken as written: posted
    mutated = found[("shop/cart.py", 1, "slips:mutated-default")]
    assert mutated["verdict"] == "NEEDS_HUMAN_REVIEW" and "line 2 changes it" in mutated["body"]
    assert "dropped without a word" in found[("shop/search.py", 5, "slips:logging-args")]["body"]


def test_a_regular_expression_the_change_adds_is_checked_for_redos(env: None, tmp_path: Path) -> None:
    base = {"web/names.py": "import re\n\nOLD = re.compile(r'^(a+)+$')\n"}
    head = {
        "web/names.py": "import re\n\nOLD = re.compile(r'^(a+)+$')\n"
        "NAME = re.compile(r'^(\\w+\\s?)*$')\nDIGITS = re.compile(r'^\\d+$')\n"
    }
    repo = tmp_path / "repo"
    commit_range(repo, base, head)
    found = [f for f in review(repo) if f["rule"] == "python:redos"]
    # the new vulnerable pattern only: not the safe one, not the one already at the base
    assert [(f["path"], f["line"]) for f in found] == [("web/names.py", 4)]
    assert found[0]["cwe"] == "CWE-1333" and "Attack string: `'0' * 3456 + '!'`" in found[0]["body"]
    assert found[0]["verdict"] == "NEEDS_HUMAN_REVIEW"  # no record yet: listed for a person


PRICING_BASE = (
    "from functools import cache\n\n\ndef total(items, tax):\n    return sum(items) * (1 + tax)\n\n\n"
    "def fmt(value):\n    return f'{value:.2f}'\n\n\ndef legacy(value):\n    return value\n\n\n"
    "@cache\ndef rate_of(x):\n    return x\n"
)
PRICING_HEAD = (
    "from functools import cache\n\n\ndef total(items, rate):\n    return sum(items) * (1 + rate)\n\n\n"
    "def fmt(value, places=2):\n    return f'{value:.{places}f}'\n\n\n"
    "@cache\ndef rate_of(x, y):\n    return x + y\n"
)
ORDERS = (  # not touched by the change
    "from shop.pricing import fmt, rate_of, total\n\n\ndef order_total(items):\n"
    "    return fmt(total(items, tax=0.2))\n\n\n"
    "def spread(args, kwargs):\n    return total(*args, **kwargs) + rate_of(1)\n\n\n"
    "def shadowed(total):\n    return total(1, tax=2)\n"
)
CART_BASE = "from . import pricing\n\n\ndef cart_total(items):\n    return pricing.total(items, 0.1)\n"
CART_HEAD = (
    "from . import pricing\nfrom .pricing import legacy\n\n\ndef cart_total(items):\n"
    "    return legacy(pricing.total(items, tax=0.1))\n"
)


def test_callers_left_broken_by_a_changed_signature_or_a_removed_name(env: None, tmp_path: Path) -> None:
    base = {
        "shop/__init__.py": "",
        "shop/pricing.py": PRICING_BASE,
        "shop/orders.py": ORDERS,
        "shop/cart.py": CART_BASE,
    }
    head = {**base, "shop/pricing.py": PRICING_HEAD, "shop/cart.py": CART_HEAD}
    repo = tmp_path / "repo"
    commit_range(repo, base, head)
    found = {(f["path"], f["line"]): f for f in review(repo) if f["rule"] == "calls:broken-caller"}
    # at the caller where the diff shows its line; at the changed definition for the untouched orders.py
    assert set(found) == {("shop/cart.py", 2), ("shop/cart.py", 6), ("shop/pricing.py", 4)}
    at_definition = found[("shop/pricing.py", 4)]["body"]
    assert "`total(items, tax)` to `total(items, rate)`" in at_definition
    assert "`shop/orders.py:5` (it passes the keyword `tax`, which the function no longer takes)" in at_definition
    assert "orders.py:9" not in at_definition and "orders.py:13" not in at_definition  # spread, shadowed
    assert "rate_of" not in json.dumps(list(found.values()))  # decorated: its signature is not the text's
    assert "imports `legacy`, which is gone" in found[("shop/cart.py", 2)]["body"]
    assert "passes the keyword `tax`" in found[("shop/cart.py", 6)]["body"]
    assert {f["verdict"] for f in found.values()} == {"REAL"}  # broken as written: posted
