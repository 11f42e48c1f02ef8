"""The four reviewers (security, architecture, code_quality, test_impact), their tools and prompts.

The bottom layer: imports nothing else of ours. `run_reviewer` is the entry point; the contracts it
consumes and produces live in `reviewers.kernel.contracts`.

The names below are loaded on first use (PEP 562): importing one analyzer or the contracts does not
import every reviewer, their tools and prompts, which a cold `reviewloop review` would otherwise pay
for before it can start its first analyzer process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reviewers.prompts import render_review_prefix
    from reviewers.registry import REVIEWER_DESCRIPTIONS, REVIEWER_SPECS, run_reviewer
    from reviewers.tools import ToolCall

_HOME = {
    "REVIEWER_DESCRIPTIONS": "reviewers.registry",
    "REVIEWER_SPECS": "reviewers.registry",
    "run_reviewer": "reviewers.registry",
    "ToolCall": "reviewers.tools",
    "render_review_prefix": "reviewers.prompts",
}

__all__ = [
    "REVIEWER_DESCRIPTIONS",
    "REVIEWER_SPECS",
    "ToolCall",
    "render_review_prefix",
    "run_reviewer",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'reviewers' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
