"""Validators judged by what their body does (`reviewers.analyzers.guard_removal.validators`)."""

from __future__ import annotations

import ast

import pytest

from reviewers.analyzers.guard_removal.validators import judge_body


def _judge(source: str) -> frozenset[str] | None:
    func = ast.parse(source).body[-1]
    assert isinstance(func, ast.FunctionDef)
    judgement = judge_body(func)
    return None if judgement is None else judgement.classes


@pytest.mark.parametrize(
    ("source", "classes"),
    [
        # a redirect check must constrain the scheme and the host
        ("def is_safe_url(url):\n    return urlparse(url).netloc in ('', 'example.com')", frozenset()),
        ("def is_safe_url(url):\n    return not urlparse(url).scheme", frozenset()),
        (
            "def is_safe_url(url):\n    p = urlparse(url)\n    return p.scheme in ('', 'https') and p.netloc in HOSTS",
            frozenset({"redirect", "ssrf"}),
        ),
        (
            "def is_safe_target(url):\n    return not urlparse(url).netloc and url.startswith('/')",
            frozenset({"redirect", "ssrf"}),
        ),
        (
            "def safe_next(url, request):\n    return url_has_allowed_host_and_scheme(url, {request.get_host()})",
            frozenset({"redirect", "ssrf"}),
        ),
        # containment must compare resolved paths
        (
            "def inside(base, path):\n    return os.path.realpath(path).startswith(os.path.realpath(base) + os.sep)",
            frozenset({"path"}),
        ),
        ("def inside(base, path):\n    return Path(path).resolve().is_relative_to(base)", frozenset({"path"})),
        ("def inside(base, path):\n    return os.path.commonprefix([path, base]) == base", frozenset()),
        ("def clean(name):\n    return name.replace('../', '')", frozenset()),
        # a body this module does not read keeps the name's word
        ("def is_valid_slug(value):\n    return bool(SLUG.match(value))", None),
    ],
)
def test_a_validator_protects_what_its_body_checks(source: str, classes: frozenset[str] | None) -> None:
    assert _judge(source) == classes
