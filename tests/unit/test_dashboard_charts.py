"""Chart geometry of the dashboard, against coordinates worked out by hand."""

from __future__ import annotations

from datetime import date

from api.dashboard.charts import (
    PALETTE,
    ChartValue,
    Dot,
    acceptance_rate,
    acceptance_series,
    bar_chart,
    line_chart,
    week_range,
    week_start,
)
from api.dashboard.queries import WeeklyAcceptance

W1, W2 = date(2026, 11, 9), date(2026, 11, 16)


def test_weeks_start_on_monday() -> None:
    assert week_start(date(2026, 11, 21)) == W2  # a Saturday
    assert week_start(W2) == W2
    assert week_range(last=date(2026, 11, 21), count=3) == [date(2026, 11, 2), W1, W2]


def test_acceptance_rate_is_the_accepted_share_of_judged_findings() -> None:
    assert acceptance_rate(3, 1) == 0.75
    assert acceptance_rate(0, 2) == 0.0
    assert acceptance_rate(0, 0) is None


def test_acceptance_series_groups_by_reviewer_or_category() -> None:
    rows = [
        WeeklyAcceptance(W1, "security", "security", 2, 1),
        WeeklyAcceptance(W1, "security", "code_quality", 0, 1),
        WeeklyAcceptance(W2, "test_impact", "test_impact", 1, 0),
    ]
    by_reviewer = acceptance_series(rows, by="reviewer", weeks=[W1, W2])
    assert list(by_reviewer) == ["security", "test_impact"]
    [sec_w1, sec_w2] = by_reviewer["security"]
    assert sec_w1 is not None and sec_w1.value == 0.5 and sec_w2 is None  # (2 + 0) of (3 + 1)
    assert "2 accepted, 2 rejected (50%)" in sec_w1.note
    assert [v.value if v else None for v in by_reviewer["test_impact"]] == [None, 1.0]

    by_category = acceptance_series(rows, by="category", weeks=[W1, W2])
    assert list(by_category) == ["code_quality", "security", "test_impact"]
    assert [v.value if v else None for v in by_category["code_quality"]] == [0.0, None]
    assert [v.value if v else None for v in by_category["security"]] == [2 / 3, None]


def test_line_chart_coordinates_joining_weeks_without_data() -> None:
    # plot box: left 20, right 190, top 10, bottom 90 → x step 85, y = 90 - 80·v
    chart = line_chart(
        {"a": [ChartValue(1.0, "one"), None, ChartValue(0.5, "half")], "b": [None, ChartValue(0.25, "q"), None]},
        ["w1", "w2", "w3"],
        width=200,
        height=100,
        margin=(10, 10, 10, 20),
    )
    assert (chart.left, chart.right, chart.top, chart.bottom) == (20, 190, 10, 90)
    assert [(t.at, t.label) for t in chart.y_ticks] == [(90, "0%"), (70, "25%"), (50, "50%"), (30, "75%"), (10, "100%")]
    assert [(t.at, t.label) for t in chart.x_ticks] == [(20, "w1"), (105, "w2"), (190, "w3")]
    a, b = chart.series
    assert a.points == "20.0,10.0 190.0,50.0"  # the line joins across the week without data
    assert a.dots == [Dot(20.0, 10.0, "one"), Dot(190.0, 50.0, "half")]  # which has no dot
    assert b.points == "105.0,70.0" and (a.color, b.color) == PALETTE[:2]


def test_line_chart_labels_at_most_about_eight_weeks_ending_with_the_last() -> None:
    chart = line_chart({}, [f"w{i}" for i in range(10)], width=200, height=100, margin=(10, 10, 10, 20))
    assert [t.label for t in chart.x_ticks] == ["w1", "w3", "w5", "w7", "w9"]
    single = line_chart({"a": [ChartValue(0.0, "")]}, ["w"], width=200, height=100, margin=(10, 10, 10, 20))
    assert single.series[0].dots == [Dot(105.0, 90.0, "")]  # one week: centred


def test_bar_chart_scales_to_the_largest_value() -> None:
    # room beside the labels: 400 - 100 - 48 = 252; rows 18 high with a 6 gap
    chart = bar_chart([("a", 4), ("b", 1), ("c", 0)], width=400, label_width=100, bar_height=18)
    assert [(bar.y, bar.width, bar.value) for bar in chart.bars] == [(0, 252, 4), (24, 63, 1), (48, 0, 0)]
    assert chart.height == 72
    assert [bar.width for bar in bar_chart([("a", 0)]).bars] == [0.0]
    assert bar_chart([]).bars == [] and bar_chart([]).height == 0
