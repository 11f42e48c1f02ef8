"""deploy/README.md stays true: the commands it tells an operator to run exist, with those options, the
HTTP paths it names are routes of the app, the files it names exist, and it covers the whole path from
nothing to a reviewed merge request."""

from __future__ import annotations

import re

from deploy_files import DEPLOY, REPO_ROOT, check_invocation, cli_commands
from fastapi import FastAPI
from starlette.routing import Match

from agent.service_settings import Settings
from api.app import create_app

README = DEPLOY / "README.md"
# `reviewloop` in command position: at the start of a shell line, or after `exec <target> [-c c] --`.
INVOCATION = re.compile(r"(?:^|\s--\s|^\$\s)reviewloop\s+([^|;&#\n`]*)", re.MULTILINE)
INLINE_INVOCATION = re.compile(r"`reviewloop ([^`]+)`")
OUR_PATH = re.compile(
    r"(?:`(?:(?:GET|POST|PUT|DELETE) )?|https?://(?:localhost:8080|reviewloop\.example\.com))"
    r"(/(?:webhooks|api|readyz|healthz|metrics|dashboard)[^\s`'\")]*)"
)


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _code_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL))


def test_commands_in_the_readme_exist() -> None:
    text = _text()
    commands = cli_commands()
    invocations = [m.group(1) for m in INVOCATION.finditer(_code_blocks(text))]
    invocations += [m.group(1) for m in INLINE_INVOCATION.finditer(text)]
    assert len(invocations) >= 6, f"the README shows too few commands: {invocations}"
    problems: dict[str, None] = {}  # ordered, without repeats
    for invocation in invocations:
        args = [a for a in invocation.split() if not a.startswith("<")]
        problem = check_invocation(args, commands, f"deploy/README.md `reviewloop {' '.join(args)}`")
        if problem:
            problems[problem] = None
    assert not problems, "\n".join(problems)


def _served(app: FastAPI, path: str) -> bool:
    """Whether a request to `path` reaches a route (any method): the router's own matching."""
    scope = {"type": "http", "path": path, "method": "GET", "root_path": "", "headers": [], "query_string": b""}
    return any(route.matches(scope)[0] != Match.NONE for route in app.router.routes)


def test_http_paths_in_the_readme_are_routes_of_the_app() -> None:
    app = create_app(Settings(database_url="postgresql://unused@127.0.0.1:1/unused"))
    assert not _served(app, "/no-such-page"), "the matcher must be able to say no"
    paths = {m.group(1).rstrip(".,:") for m in OUR_PATH.finditer(_text())}
    assert {"/webhooks/gitlab", "/readyz", "/healthz"} <= paths
    unknown = [p for p in sorted(paths) if not _served(app, re.sub(r"<[^>]+>", "1", p))]
    assert not unknown, f"deploy/README.md names paths the API does not serve: {unknown}"


def test_files_the_readme_names_exist() -> None:
    names = set(re.findall(r"`((?:k8s/)?[\w.-]+\.(?:yaml|txt|example)|Dockerfile(?:\.gpu)?|env\.example)`", _text()))
    assert names, "the README names its files"
    missing = [n for n in sorted(names) if not any((d / n).exists() for d in (DEPLOY, DEPLOY / "k8s", REPO_ROOT))]
    assert not missing, f"deploy/README.md names files that do not exist: {missing}"


def test_the_readme_walks_from_nothing_to_a_reviewed_merge_request() -> None:
    text = _text()
    for needle in (
        "Prerequisites",
        "`api`",  # the token scope, and why
        "`read_api`",
        "Developer",
        "/webhooks/gitlab",
        "Merge request events",
        "Emoji events",
        "Comments",
        "reviewloop db upgrade",
        "/readyz",
        "👍",
        "reviewloop retrain",
        "Sizing",
        "reviewloop models rollback",
        "kubectl apply -k deploy/k8s",
        "docker compose up -d",
    ):
        assert needle in text, f"deploy/README.md does not cover {needle!r}"
