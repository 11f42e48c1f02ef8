"""The benchmark's pure arithmetic: target verdicts, percentiles, growth exponents, prepared requests,
and the reading of a reviewer's targets by the delayed model server — by hand-computed values."""

from __future__ import annotations

import math

import httpx
import pytest

# bench/ is the repository's benchmark folder, not an installed package: pyproject's pythonpath finds it.
from bench.fake_llm_server import _reviewer_targets
from bench.report import Target, fmt, table
from bench.scaling import growth_exponent, model_critical_path_s, seed_for
from bench.webhook_load import percentile, raw_request
from bench.webhook_slow_senders import ANSWER_WAIT_S, SenderResult, summarize
from bench.webhook_slow_senders import targets as slow_sender_targets
from reviewers.kernel.contracts import PlanItem
from reviewers.prompts import render_task


def test_a_target_below_a_limit_is_met_with_its_margin_or_missed_by_gap_and_factor() -> None:
    assert Target("t", 1.5, 2.0, "below", "s").verdict() == "met (margin 0.50 s)"
    missed = Target("t", 15.0, 2.0, "below", "s")
    assert not missed.met
    assert missed.verdict() == "**missed** by 13 s (7.50×)"
    assert not Target("t", 2.0, 2.0, "below", "s").met  # strictly below


def test_an_at_least_target_reports_the_factor_it_falls_short_by() -> None:
    assert Target("spans", 24_000.0, 20_000.0, "at_least", "spans/s").verdict() == "met (margin 4,000 spans/s)"
    assert Target("spans", 10_000.0, 20_000.0, "at_least", "spans/s").verdict() == ("**missed** by 10,000 spans/s (2×)")


def test_an_unmeasured_target_is_neither_met_nor_missed() -> None:
    t = Target("t", float("nan"), 1.0, "at_most", "")
    assert not t.met and t.verdict() == "not measured"


def test_numbers_are_shown_with_three_significant_figures() -> None:
    assert [fmt(x) for x in (0.0412, 3.456, 12.34, 123.4, 1234.5, 7.0)] == ["0.04", "3.46", "12.3", "123", "1,234", "7"]
    assert table(["a", "b"], [(1.0, "x")]) == "| a | b |\n|---:|---:|\n| 1 | x |"


def test_percentiles_interpolate_between_closest_ranks() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 50) == 25.0  # rank 1.5
    assert percentile(values, 99) == pytest.approx(39.7)  # rank 2.97: 30 + 0.97 * 10
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))


def test_growth_exponent_is_the_log_log_slope_from_a_thousand_lines_up() -> None:
    linear = [(100, 9.0), (1_000, 1.0), (10_000, 10.0), (50_000, 50.0)]  # the 100-line point is ignored
    assert growth_exponent(linear) == pytest.approx(1.0)
    assert growth_exponent([(1_000, 2.0), (10_000, 2.0)]) == pytest.approx(0.0)
    assert math.isnan(growth_exponent([(1_000, 2.0)]))


def test_the_model_critical_path_counts_judgments_in_rounds() -> None:
    # strategy (1) + 4 reviewer steps + ceil(9 / 8) = 2 judgment rounds = 7 calls in sequence
    calls = {"Strategy": 1, "ToolCall": 16, "ModelJudgment": 9}
    assert model_critical_path_s(calls, reviewer_steps=4, delay_s=0.2) == pytest.approx(1.4)


def test_seeds_differ_across_sizes_repeats_and_series() -> None:
    seeds = {seed_for(lines, r, salt) for lines in (100, 1_000) for r in range(3) for salt in (0, 3, 7)}
    assert len(seeds) == 18


def test_a_prepared_request_is_http_1_1_with_its_length() -> None:
    raw = raw_request(httpx.URL("http://127.0.0.1:8000/webhooks/gitlab"), b'{"a":1}', {"X-Gitlab-Token": "s"})
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n") == [
        b"POST /webhooks/gitlab HTTP/1.1",
        b"Host: 127.0.0.1:8000",
        b"Content-Length: 7",
        b"X-Gitlab-Token: s",
    ]
    assert body == b'{"a":1}'


def test_the_delayed_model_reads_the_files_a_reviewer_task_lists() -> None:
    task = render_task(
        instructions="Find bugs.",
        plan=PlanItem(reviewer="security"),
        targets=["a.py", "pkg/b.py"],
        repo_instructions=["x"],
    )
    messages = [{"role": "system", "content": "protocol"}, {"role": "user", "content": task}]
    assert _reviewer_targets(messages) == ["a.py", "pkg/b.py"]
    assert _reviewer_targets([{"role": "user", "content": "No changed file is yours to review"}]) == []


def test_slow_senders_are_summarized_unanswered_counted_at_the_wait() -> None:
    results = [
        SenderResult("silent", 401, 0.02, True, 0),
        SenderResult("trickle", 401, 0.04, False, 3),
        SenderResult("stream", None, ANSWER_WAIT_S, False, 5 * 2**20, "timeout"),
    ]
    row = summarize(results, rss_before=100_000_000, rss_peak=300_000_000, rss_after=120_000_000)
    assert row["statuses"] == {"401": 2, "None": 1}
    assert (row["unanswered"], row["left_open"]) == (1, 1)
    assert row["failures"] == {"stream: timeout": 1}
    assert row["answer_max_s"] == ANSWER_WAIT_S and row["answer_p50_s"] == pytest.approx(0.03)
    assert row["body_mib_sent"] == pytest.approx(5 + 3 / 2**20)
    rss_target, answer_target = slow_sender_targets(row)
    assert (rss_target.measured, rss_target.met) == (300.0, False)
    assert (answer_target.measured, answer_target.met) == (ANSWER_WAIT_S, False)
