"""What a team lead reads on the dashboard (issue 42), in a real browser on a seeded database: merge
requests by title and project path with links to GitLab, acceptance per rule with the rejected rules
marked, and the suppressions in force with who, when and why. Pages are saved as PNG screenshots
(test-artifacts/, or the folder `REVIEWLOOP_SCREENSHOTS` names: docs/screenshots/ holds the committed
ones, made by this test)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from dashboard_harness import ENV_TOKEN, LiveServer, rows
from fakes.gitlab_server import BOT_TOKEN, FakeGitLab
from test_dashboard_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

from agent.gitlab.client import GitLabPlatform
from agent.gitlab.review import ReviewDeps, review_gitlab_merge_request
from agent.session import prepare_database
from agent.store.db import open_pool
from agent.verdicts.feedback import MIN_PEOPLE

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: `make setup` installs Debian's chromium as root"
)
PID = 41
CHANGES = {
    1: (
        "Ledger export to CSV",
        {
            "ledger/__init__.py": "",
            "ledger/export.py": "import os\nimport sys\n\n\ndef export(path):\n    os.system('cp ' + path + ' /tmp')\n",
        },
    ),
    2: (
        "Nightly reconciliation job",
        {
            "ledger/__init__.py": "",
            "ledger/jobs.py": "import json\nimport re\n\n\ndef load(text):\n    return json.loads(text)\n",
        },
    ),
}


@pytest.fixture
def page() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        finally:
            browser.close()


def seed(dsn: str) -> None:
    """Two merge requests reviewed through GitLab's API (the loopback fake), then votes: one rule
    accepted, one rejected by enough people to suppress it in its folder."""
    prepare_database(dsn)
    with FakeGitLab() as fake, open_pool(dsn) as pool:
        fake.add_project(PID, "payments/ledger")
        for iid, (title, head) in CHANGES.items():
            fake.add_merge_request(PID, iid, files_base={"ledger/__init__.py": ""}, files_head=head, title=title)
            platform = GitLabPlatform(fake.url, BOT_TOKEN, timeout=5, max_retries=1)
            review_gitlab_merge_request(
                ReviewDeps(pool=pool, dsn=dsn, platform=platform, posting="all"),
                project=str(PID),
                mr_iid=iid,
                head_sha=None,
            )
    found = rows(dsn, "SELECT id, rule, severity FROM findings ORDER BY id")
    accepted = next(f for f in found if f["severity"] in ("high", "critical"))
    rejected = next(f for f in found if f["rule"] != accepted["rule"] and f["severity"] in ("low", "medium", "info"))
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO feedback (finding_id, user_key, source, value) VALUES (%s, 'gitlab:7', 'emoji', 1)",
            (accepted["id"],),
        )
        for person in range(MIN_PEOPLE):
            conn.execute(
                "INSERT INTO feedback (finding_id, user_key, source, value, comment) VALUES (%s, %s, 'emoji', -1, %s)",
                (rejected["id"], f"gitlab:{100 + person}", "we keep these imports for the plugin loader"),
            )


def test_a_lead_sees_titles_rule_acceptance_and_suppressions(db_dsn: str, live: LiveServer, page: object) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    seed(db_dsn)
    out = Path(os.environ.get("REVIEWLOOP_SCREENSHOTS") or ARTIFACTS)
    out.mkdir(parents=True, exist_ok=True)

    page.goto(f"{live.url}/dashboard/login?next=/dashboard")
    page.get_by_label("API token").fill(ENV_TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{live.url}/dashboard")
    for iid, (title, _) in CHANGES.items():
        expect(page.get_by_role("link", name=title)).to_be_visible()
        link = page.get_by_role("link", name=f"payments/ledger !{iid}")
        expect(link).to_be_visible()
        assert (link.get_attribute("href") or "").endswith(f"/payments/ledger/-/merge_requests/{iid}")
    page.screenshot(path=str(out / "dashboard-reviews.png"), full_page=True)

    page.get_by_role("link", name="Quality").click()
    rules_table = page.locator("table.rules")
    expect(rules_table).to_be_visible()
    expect(rules_table.locator("tr.rejected-rule")).to_have_count(1)
    expect(page.get_by_role("heading", name="Which rules do people reject?")).to_be_visible()
    page.screenshot(path=str(out / "dashboard-quality.png"), full_page=True)

    page.goto(f"{live.url}/dashboard/suppressions")
    row = page.locator("tr.suppression")
    expect(row).to_have_count(1)
    expect(row.locator(".reason")).to_contain_text("we keep these imports for the plugin loader")
    expect(row.locator(".who")).to_contain_text("gitlab:100")
    expect(row.locator("td").first).to_have_text("payments/ledger")  # the project by its path, not its id
    page.screenshot(path=str(out / "dashboard-suppressions.png"), full_page=True)
    for name in ("dashboard-reviews.png", "dashboard-quality.png", "dashboard-suppressions.png"):
        assert (out / name).stat().st_size > 10_000
