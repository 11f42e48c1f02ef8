"""The reviewed repository's own settings, from `.reviewloop.toml` at its root (all optional).

Example::

    include = ["src/*", "lib/*"]
    exclude = ["*.lock", "vendor/*"]
    reviewers = ["security", "code_quality", "test_impact", "architecture"]
    min_severity = "low"
    resolve_outdated = true
    max_discussions = 10
    review_budget = 12   # reviewer steps a learned strategy's plan spends on the whole review (none: no cap)

    [[layers]]
    name = "core"
    paths = ["core/*"]
    may_import = []

    [instructions]
    "billing/*" = "Money amounts are integers in cents."

    [agreement]          # with a model: independent executions under diverse strategies
    strategies = 3       # N; 1 = a single execution
    min_support = 2      # k: a model-only finding reported by fewer goes to a human first

A merge request is reviewed under the settings of its target branch (read at the MR's base commit),
never under the file its own head carries: an author must not be able to switch the review off. A
change to this file inside a merge request is itself reported (`describe_config_change`), and what
no file may turn off holds whatever it says (`with_floor`): the security reviewer always runs, so
the secrets scan and the coverage report do (files outside `include`/`exclude` are still scanned
for secrets and named as excluded), and critical findings always post, whatever `max_discussions`.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

from pydantic import ValidationError

from reviewers.kernel.contracts import RepoConfig, ReviewerName, Workspace
from reviewers.kernel.errors import ConfigError

CONFIG_FILE = ".reviewloop.toml"
# The reviewer no configuration can turn off: it carries the secrets scan, and with it the coverage
# report names every changed file it did not read in full (agent.graph runs it on excluded files too).
MANDATORY_REVIEWER: ReviewerName = "security"
MAX_SETTING_CHARS = 120  # a changed setting is quoted up to this length in the summary


def parse_repo_config(text: str, *, source: str = CONFIG_FILE) -> RepoConfig:
    """Parse the TOML text of a repository config; a bad file is a ConfigError naming the problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    try:
        return RepoConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ConfigError(f"{source}: {where}: {first['msg']}") from exc


def load_repo_config(workspace: Workspace) -> RepoConfig:
    """The config at the head commit, or the defaults when the repository has none."""
    text = workspace.read_file(CONFIG_FILE)
    return RepoConfig() if text is None else parse_repo_config(text)


def with_floor(config: RepoConfig) -> RepoConfig:
    """The config as a review runs it: what no repository may turn off put back (the security
    reviewer, whose secrets scan reads excluded files as well)."""
    if MANDATORY_REVIEWER in config.reviewers:
        return config
    return config.model_copy(update={"reviewers": [MANDATORY_REVIEWER, *config.reviewers]})


def floor_notes(config: RepoConfig) -> list[str]:
    """What `with_floor` overrides in this config, in words for the summary."""
    notes = []
    if MANDATORY_REVIEWER not in config.reviewers:
        notes.append(
            f"`{CONFIG_FILE}` leaves out the {MANDATORY_REVIEWER} reviewer; it ran anyway, because no"
            " configuration can turn off the secrets scan or the coverage report."
        )
    if config.max_discussions == 0:
        notes.append(
            f"`{CONFIG_FILE}` sets `max_discussions = 0`; critical findings still post as threads, the rest"
            " are listed below."
        )
    return notes


def target_config(base_text: str | None) -> tuple[str | None, list[str]]:
    """The config text a merge request is reviewed under (its target branch's, at the MR's base) and
    notes for the summary: an invalid file is named with its problem, and the review runs on the
    defaults instead of failing without a word."""
    if base_text is None:
        return None, []
    try:
        config = parse_repo_config(base_text, source=f"{CONFIG_FILE} on the target branch")
    except ConfigError as exc:
        return None, [f"{exc}. The review ran on the default settings."]
    return base_text, floor_notes(config)


def _setting(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = text if len(text) <= MAX_SETTING_CHARS else text[: MAX_SETTING_CHARS - 1] + "…"
    return "`" + text.replace("`", "'") + "`"


def describe_config_change(base_text: str | None, head_text: str | None) -> list[str]:
    """What a merge request's change to `.reviewloop.toml` would change once merged, one line per
    setting, for the summary; empty when the file is unchanged. The change is reported, never
    applied: this review ran under the target branch's settings."""
    if (base_text or "") == (head_text or ""):
        return []
    try:
        before = parse_repo_config(base_text or "").model_dump(mode="json")
    except ConfigError:
        before = RepoConfig().model_dump(mode="json")
    opening = (
        f"This merge request changes `{CONFIG_FILE}`. The review ran under the target branch's settings;"
        " once merged, the change would:"
    )
    if head_text is None:
        return [opening, "- remove the file: every setting goes back to its default"]
    try:
        after = parse_repo_config(head_text).model_dump(mode="json")
    except ConfigError as exc:
        return [opening, f"- make the file invalid ({exc}): reviews would run on the default settings"]
    lines = [
        f"- set `{key}` from {_setting(before.get(key))} to {_setting(after.get(key))}"
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]
    after_config = RepoConfig.model_validate(after)
    lines += [f"- (and still: {note})" for note in floor_notes(after_config)]
    return [opening, *(lines or ["- change no setting (comments or layout only)"])]
