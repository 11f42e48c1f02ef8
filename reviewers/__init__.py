"""The four reviewers (security, architecture, code_quality, test_impact), their tools and prompts.

The bottom layer: imports nothing else of ours. `run_reviewer` is the entry point; the contracts it
consumes and produces live in `reviewers.kernel.contracts`.
"""

from reviewers.prompts import render_review_prefix
from reviewers.registry import REVIEWER_DESCRIPTIONS, REVIEWER_SPECS, run_reviewer
from reviewers.tools import ToolCall

__all__ = [
    "REVIEWER_DESCRIPTIONS",
    "REVIEWER_SPECS",
    "ToolCall",
    "render_review_prefix",
    "run_reviewer",
]
