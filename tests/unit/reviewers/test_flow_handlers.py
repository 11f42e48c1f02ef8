"""Which lxml a repository pins: lxml before 5 resolves entities in its default parser (XXE), from 5 it
does not, so the default parser is a sink only where the requirements keep lxml below 5."""

from __future__ import annotations

import pytest

from reviewers.analyzers.flow.handlers import lxml_resolves_by_default
from reviewers.analyzers.python_security import project_for


@pytest.mark.parametrize(
    ("path", "text", "below_5"),
    [
        ("requirements.txt", "flask\nlxml==4.9.3\n", True),
        ("requirements.txt", "lxml == 4.2.1  # pinned for the old parser\n", True),
        ("requirements.txt", "lxml>=4.6,<5\n", True),
        ("pyproject.toml", '[project]\ndependencies = ["lxml<5", "flask"]\n', True),
        ("pyproject.toml", '[tool.poetry.dependencies]\nlxml = "^4.9"\n', True),
        ("Pipfile", '[packages]\nlxml = "==4.9"\n', True),
        ("setup.py", 'setup(install_requires=["lxml~=4.2"])\n', True),
        ("requirements.txt", "lxml\n", False),
        ("requirements.txt", "lxml>=4.2\n", False),
        ("requirements.txt", "lxml<6\n", False),
        ("requirements.txt", "lxml[html_clean]~=5.2\n", False),
        ("requirements.txt", "lxml-stubs==0.4\npylxml==4.0\n", False),
    ],
)
def test_lxml_below_5_is_read_from_the_requirements(path: str, text: str, below_5: bool) -> None:
    project = project_for(lambda p: text if p == path else None)
    assert lxml_resolves_by_default(project) is below_5
