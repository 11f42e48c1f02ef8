import pytest

from agent.repo_config import describe_config_change, load_repo_config, parse_repo_config, target_config, with_floor
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


def test_the_target_branchs_settings_keep_their_floor_and_a_change_is_described() -> None:
    text, notes = target_config("reviewers = []\nmax_discussions = 0\n")
    assert text is not None and with_floor(parse_repo_config(text)).reviewers == ["security"]
    assert any("it ran anyway" in n for n in notes) and any("critical findings still post" in n for n in notes)
    assert target_config("reviewers = [\n")[0] is None
    assert "The review ran on the default settings." in target_config("reviewers = [\n")[1][0]
    assert describe_config_change("a = 1\n", "a = 1\n") == []
    lines = describe_config_change(None, 'exclude = ["*"]\n')
    assert lines[1:] == ['- set `exclude` from `[]` to `["*"]`']
    assert "make the file invalid" in describe_config_change(None, "x = [")[1]
    assert "remove the file" in describe_config_change("min_severity = 'high'\n", None)[1]
