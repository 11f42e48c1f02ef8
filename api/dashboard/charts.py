"""Chart geometry for the dashboard, computed on the server and drawn as inline SVG by a template.

No JavaScript and no chart library: the numbers become coordinates here (pure functions, tested
with hand-computed values) and `templates/dashboard/_charts.html` turns them into SVG elements,
escaping every label like any other text on the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

from api.dashboard.queries import WeeklyAcceptance

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies (yellow left out:
# it vanishes on a white background).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
Y_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class ChartValue:
    value: float  # 0..1
    note: str  # the tooltip: what the point stands for, in words


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    note: str


@dataclass(frozen=True)
class LineSeries:
    label: str
    color: str
    points: str  # SVG polyline `points` through the weeks that have a value
    dots: list[Dot]  # one per week with a value: where the data is, as opposed to the line between


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    series: list[LineSeries]


@dataclass(frozen=True)
class Bar:
    label: str
    y: float
    width: float
    value: int


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    label_width: float
    bar_height: float
    bars: list[Bar]


def week_start(day: date) -> date:
    """The Monday of `day`'s week (ISO weeks, as Postgres' `date_trunc('week', ...)`)."""
    return day - timedelta(days=day.weekday())


def week_range(*, last: date, count: int) -> list[date]:
    """The `count` Mondays up to and including the one of `last`'s week, oldest first."""
    end = week_start(last)
    return [end - timedelta(weeks=count - 1 - i) for i in range(count)]


def acceptance_rate(accepted: int, rejected: int) -> float | None:
    """Accepted share of the findings humans judged; None when nobody judged any."""
    judged = accepted + rejected
    return accepted / judged if judged else None


def acceptance_series(
    rows: Sequence[WeeklyAcceptance],
    *,
    by: Literal["reviewer", "category", "rule", "project"],
    weeks: Sequence[date],
) -> dict[str, list[ChartValue | None]]:
    """label → one value per week in `weeks` (None for a week without judged findings), labels sorted."""
    counts: dict[str, dict[date, tuple[int, int]]] = {}
    for row in rows:
        label = str(getattr(row, by)) or "(none)"
        acc, rej = counts.setdefault(label, {}).get(row.week, (0, 0))
        counts[label][row.week] = (acc + row.accepted, rej + row.rejected)
    out: dict[str, list[ChartValue | None]] = {}
    for label in sorted(counts):
        values: list[ChartValue | None] = []
        for week in weeks:
            acc, rej = counts[label].get(week, (0, 0))
            rate = acceptance_rate(acc, rej)
            values.append(
                None
                if rate is None
                else ChartValue(
                    rate, f"{label}, week of {week.isoformat()}: {acc} accepted, {rej} rejected ({rate:.0%})"
                )
            )
        out[label] = values
    return out


def line_chart(
    series: Mapping[str, Sequence[ChartValue | None]],
    x_labels: Sequence[str],
    *,
    width: int = 960,
    height: int = 260,
    # top, right, bottom, left: room for the % labels on the left and half a week label on the right
    margin: tuple[float, float, float, float] = (12.0, 32.0, 28.0, 44.0),
) -> LineChart:
    """Lines of 0..1 values over evenly spaced x positions.

    A week without judged findings has no value: the line joins its neighbours across it and only
    the weeks with data get a dot (with their counts as the tooltip), so sparse feedback still reads
    as a trend without pretending the empty weeks were 0 %.
    """
    top, right_margin, bottom_margin, left = margin
    right, bottom = width - right_margin, height - bottom_margin
    n = len(x_labels)
    step = (right - left) / (n - 1) if n > 1 else 0.0

    def x_at(i: int) -> float:
        return left + i * step if n > 1 else (left + right) / 2

    def y_at(value: float) -> float:
        return bottom - value * (bottom - top)

    # at most ~8 x labels so they never overlap; the last week is always labelled
    every = max(1, -(-n // 8))
    x_ticks = [Tick(x_at(i), x_labels[i]) for i in range(n) if (n - 1 - i) % every == 0]
    y_ticks = [Tick(y_at(v), f"{v:.0%}") for v in Y_TICKS]
    lines = []
    for k, (label, values) in enumerate(series.items()):
        dots = [
            Dot(round(x_at(i), 1), round(y_at(point.value), 1), point.note)
            for i, point in enumerate(values)
            if point is not None
        ]
        lines.append(LineSeries(label, PALETTE[k % len(PALETTE)], " ".join(f"{d.x:.1f},{d.y:.1f}" for d in dots), dots))
    return LineChart(width, height, left, top, right, bottom, x_ticks, y_ticks, lines)


def bar_chart(
    rows: Sequence[tuple[str, int]], *, width: int = 960, label_width: float = 240.0, bar_height: float = 18.0
) -> BarChart:
    """Horizontal bars scaled to the largest value (which fills the width beside the labels)."""
    gap = bar_height / 3
    room = width - label_width - 48  # space on the right for the number
    largest = max((value for _, value in rows), default=0)
    bars = [
        Bar(label, i * (bar_height + gap), room * value / largest if largest else 0.0, value)
        for i, (label, value) in enumerate(rows)
    ]
    height = int(len(rows) * (bar_height + gap)) if rows else 0
    return BarChart(width, height, label_width, bar_height, bars)
