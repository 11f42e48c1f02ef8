"""Databricks notebooks exported as Python source: a namespace the file does not show.

A notebook exported to a `.py` file starts with `# Databricks notebook source`, and its cells are
separated by `# COMMAND ----------`. When it runs, the workspace injects names the file never binds
(`spark`, `dbutils`, `display`, ...), and a `%run ./Other` cell (exported as `# MAGIC %run ./Other`)
executes another notebook in the same namespace first, so every name that notebook binds is defined
here too. An "undefined name" in such a file is therefore only known to be one when it is none of
the injected names and the notebook runs no other notebook (issue 39: 19 wrong F821 findings on a
held-out project's notebooks, six of them posted).
"""

from __future__ import annotations

import re

NOTEBOOK_HEADER = "# Databricks notebook source"
# what the Databricks runtime binds in every Python notebook's namespace
RUNTIME_NAMES = frozenset(
    {"spark", "sc", "sqlContext", "dbutils", "display", "displayHTML", "table", "sql", "getArgument", "udf"}
)
_RUN_CELL = re.compile(r"^#\s*MAGIC\s+%run\b", re.MULTILINE)


def is_databricks_notebook(text: str) -> bool:
    return text.lstrip("\ufeff").startswith(NOTEBOOK_HEADER)


def runs_other_notebooks(text: str) -> bool:
    """Whether a `%run` cell executes another notebook into this one's namespace first."""
    return bool(_RUN_CELL.search(text))


def notebook_may_define(text: str, name: str) -> bool:
    """Whether `name`, unbound in the file, may still be defined when the notebook runs."""
    if not is_databricks_notebook(text):
        return False
    return name in RUNTIME_NAMES or runs_other_notebooks(text)
