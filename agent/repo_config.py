"""The reviewed repository's own settings, from `.reviewloop.toml` at its root (all optional).

Example::

    include = ["src/*", "lib/*"]
    exclude = ["*.lock", "vendor/*"]
    reviewers = ["security", "code_quality", "test_impact", "architecture"]
    min_severity = "low"
    resolve_outdated = true
    max_discussions = 10

    [[layers]]
    name = "core"
    paths = ["core/*"]
    may_import = []

    [instructions]
    "billing/*" = "Money amounts are integers in cents."

    [agreement]          # with a model: independent executions under diverse strategies
    strategies = 3       # N; 1 = a single execution
    min_support = 2      # k: a model-only finding reported by fewer goes to a human first
"""

from __future__ import annotations

import tomllib

from pydantic import ValidationError

from reviewers.kernel.contracts import RepoConfig, Workspace
from reviewers.kernel.errors import ConfigError

CONFIG_FILE = ".reviewloop.toml"


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
