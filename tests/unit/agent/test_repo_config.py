import pytest

from agent.repo_config import load_repo_config, parse_repo_config
from agent.workspaces.snapshot import SnapshotWorkspace
from reviewers.kernel.errors import ConfigError


def test_parses_layers_instructions_and_globs() -> None:
    cfg = parse_repo_config(
        'exclude = ["vendor/*"]\nmin_severity = "medium"\n'
        '[[layers]]\nname = "core"\npaths = ["core/*"]\n\n[instructions]\n"billing/*" = "cents"\n'
    )
    assert cfg.layers[0].name == "core" and cfg.min_severity == "medium"
    assert not cfg.wants("vendor/x.py") and cfg.wants("app/x.py")
    assert cfg.instructions_for("billing/a.py") == ["cents"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("min_severity = [", "not valid TOML"),
        ('min_severity = "loud"', "min_severity"),
        ("bogus = 1", "bogus"),
    ],
)
def test_bad_config_is_one_clear_error(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_repo_config(text)


def test_missing_config_gives_defaults() -> None:
    assert load_repo_config(SnapshotWorkspace({})).reviewers == [
        "security",
        "architecture",
        "code_quality",
        "test_impact",
    ]
