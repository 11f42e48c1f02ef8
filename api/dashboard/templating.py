"""The dashboard's HTML: Jinja2 templates shipped in the package, with escaping always on.

Everything shown comes from the database and much of it from a model or a merge request's author
(titles, finding bodies, strategies), so it is data: autoescape is on for every template and the
only markup the filters below produce is built from escaped pieces.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

MAX_METRICS_SHOWN = 16  # a run can log dozens of numbers; the page shows the first ones, the API has all
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def inline_code(text: str) -> Markup:
    """`text` escaped, with Markdown's `code` spans (as finding bodies use them) set in <code>."""
    out: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(text):
        out.append(escape(text[last : match.start()]))
        out.append(Markup("<code>{}</code>").format(match.group(1)))
        last = match.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


def when(moment: datetime | None) -> str:
    """A timestamp as UTC minutes; '—' when there is none."""
    if moment is None:
        return "—"
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def format_value(value: Any) -> str:
    """A metric for people: floats to 4 significant digits, booleans and None as words."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "—" if not math.isfinite(value) else f"{value:.4g}"
    return str(value)


def metric_items(metrics: Mapping[str, Any], *, limit: int = MAX_METRICS_SHOWN) -> list[tuple[str, str]]:
    """Nested metrics flattened to (dotted key, formatted value); lists are shown by their length."""
    items: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        elif isinstance(value, list):
            items.append((prefix, f"[{len(value)} values]"))
        else:
            items.append((prefix, format_value(value)))

    walk("", metrics)
    return items[:limit]


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("api", "templates"),
        autoescape=True,  # every template, whatever its extension (the charts are SVG inside HTML)
        undefined=StrictUndefined,  # a misspelt name fails the test that renders it, not silently
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["inline_code"] = inline_code
    env.filters["when"] = when
    env.filters["metric_items"] = metric_items
    env.filters["value"] = format_value
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
