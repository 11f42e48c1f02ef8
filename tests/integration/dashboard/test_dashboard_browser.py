"""The dashboard in a real browser: Debian's headless Chromium, driven by Playwright, against the
service on loopback, over a review the real pipeline stored. A 👎 clicked on the page must become a
feedback row in Postgres. The pages are saved as test-artifacts/dashboard.png and dashboard-quality.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_harness import ENV_TOKEN, ENV_TOKEN_NAME, LiveServer, review_through_pipeline, rows

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"
# Debian's build is launched as it is (never `playwright install`); these flags keep it offline and quiet.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # tests run as root in a container, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `make setup` installs Debian's chromium as root"
)


@pytest.fixture
def page() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            yield context.new_page()
        finally:
            browser.close()


def test_thumbs_down_from_the_page_is_a_feedback_row(db_dsn: str, live: LiveServer, page: object) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    outcome = review_through_pipeline(db_dsn)
    [sql_finding] = [
        v for v in outcome.verified if v.finding.category == "security" and v.finding.path == "shop/orders.py"
    ]
    [finding_id] = [
        r["id"] for r in rows(db_dsn, "SELECT id FROM findings WHERE fingerprint = %s", sql_finding.finding.fingerprint)
    ]

    # the dashboard sends a browser without a session to the login form
    page.goto(f"{live.url}/dashboard")
    expect(page).to_have_url(f"{live.url}/dashboard/login?next=/dashboard")
    page.get_by_label("API token").fill(ENV_TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{live.url}/dashboard")

    # the review the pipeline stored is listed; open it
    expect(page.get_by_role("link", name="Orders lookup")).to_be_visible()
    page.get_by_role("link", name="Orders lookup").click()
    expect(page).to_have_url(f"{live.url}/dashboard/reviews/{outcome.review_id}")
    expect(page.locator("pre.strategy")).to_contain_text("security")
    card = page.locator(f"#finding-{finding_id}")
    expect(card).to_contain_text(sql_finding.finding.title)
    expect(card).to_contain_text("shop/orders.py:8")
    expect(card.locator(".verdict")).to_have_text("REAL")
    expect(page.locator("article.finding")).to_have_count(len(outcome.verified))

    # thumbs-down from the page
    card.get_by_role("button", name="not helpful").click()
    expect(page).to_have_url(f"{live.url}/dashboard/reviews/{outcome.review_id}#finding-{finding_id}")
    card = page.locator(f"#finding-{finding_id}")
    expect(card.locator(".net")).to_have_text("-1")
    expect(card.get_by_role("button", name="withdraw not helpful")).to_have_attribute("aria-pressed", "true")

    [vote] = rows(db_dsn, "SELECT * FROM feedback WHERE finding_id = %s", finding_id)
    assert (vote["value"], vote["source"], vote["user_key"]) == (-1, "dashboard", f"token:{ENV_TOKEN_NAME}")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000

    # the vote is on the quality chart: the security line has this week's point at 0 %
    page.get_by_role("link", name="Quality").click()
    expect(page.locator("circle title").first).to_contain_text("0 accepted, 1 rejected (0%)")
    expect(page.locator("svg[role=img]")).to_have_count(3)
    page.screenshot(path=str(ARTIFACTS / "dashboard-quality.png"), full_page=True)
