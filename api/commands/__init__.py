"""The CLI's command groups; `out()` is their stdout."""

from __future__ import annotations

from rich.console import Console


def out() -> Console:
    """stdout, sized as each command prints (COLUMNS then); a module-level Console fixed it at import."""
    return Console()
