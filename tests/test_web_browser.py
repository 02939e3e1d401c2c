"""The viewer as a person uses it: the real pages in headless Chromium (Playwright).

Chromium is Debian's (``/usr/bin/chromium``, or ``CHATLEDGER_CHROMIUM``); Playwright's
own browser download is never used. Without Chromium these tests are skipped with the
reason shown -- except in CI (``CI`` or ``CHATLEDGER_REQUIRE_BROWSER`` set), where that
is a failure. ``CHATLEDGER_SCREENSHOTS=docs/img`` writes the screenshots docs/viewer.md
shows (from the SQLite run); otherwise they go to the test's tmp dir.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from chatledger import SessionLedger
from chatledger.web import ViewerServer, create_app
from support import ALICE, FlakySummarizer
from web_support import EVIL, SECRET, populate, tamper

CHROMIUM = os.environ.get("CHATLEDGER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRED = any(
    os.environ.get(name, "") not in ("", "0", "false")
    for name in ("CI", "CHATLEDGER_REQUIRE_BROWSER")
)
CHROMIUM_ARGS = [
    "--no-sandbox",  # tests run as root in CI
    "--disable-gpu",
    "--disable-dev-shm-usage",
    # No connections of its own: this machine's network is closed and the viewer is offline.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 15_000  # a shared 2-core machine: generous, never retried
expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian Chromium driven by Playwright, shared by this module's tests."""
    if not Path(CHROMIUM).is_file():
        message = f"Chromium not found at {CHROMIUM}: install Debian's chromium package"
        if REQUIRED:
            pytest.fail(f"{message} (required here: CI or CHATLEDGER_REQUIRE_BROWSER is set)")
        pytest.skip(f"{message} to run the browser tests")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def populated(make_ledger: Callable[..., SessionLedger]) -> SessionLedger:
    """The sample ledger of web_support.populate."""
    flaky = FlakySummarizer()
    ledger = make_ledger(summarizer=flaky)
    populate(ledger, flaky)
    return ledger


@pytest.fixture
def site(populated: SessionLedger) -> Iterator[str]:
    """The viewer of the populated ledger as alice (a member of acme), on a free port."""
    app = create_app(populated, ALICE, poll_interval=0.2)
    with ViewerServer(app, "127.0.0.1", 0) as server:
        yield server.url


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page; the test fails on any script error the page reports."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
    yield opened
    context.close()
    assert errors == []


@pytest.fixture
def shoot(backend: str, tmp_path: Path) -> Callable[[Page, str], None]:
    """Save a screenshot (to docs/img with CHATLEDGER_SCREENSHOTS, from the SQLite run)."""
    target = os.environ.get("CHATLEDGER_SCREENSHOTS")
    folder = Path(target) if target and backend == "sqlite" else tmp_path

    def take(page: Page, name: str) -> None:
        path = folder / f"viewer-{name}.png"
        page.screenshot(path=str(path))
        assert path.read_bytes().startswith(b"\x89PNG")

    return take


def test_list_session_version_context_and_diff(
    page: Page, site: str, shoot: Callable[[Page, str], None]
) -> None:
    """From the list to a session, a click on a version shows its state and prompt context,
    and picking two versions shows their diff."""
    page.goto(site)
    rows = page.locator("tr.session-row")
    expect(rows).to_have_count(2)
    expect(page.locator("a.key", has_text="t-1-retry")).to_be_visible()
    shoot(page, "sessions")

    page.locator("a.key", has_text="t-1").filter(has_not_text="retry").click()
    expect(page).to_have_url(site + "sessions/acme/t-1")
    expect(page.locator("tr.ev-row")).to_have_count(15)
    expect(page.locator("tr#v14 .detail.error")).to_have_text("summarizer exploded")
    expect(page.locator("figure.chart svg")).to_have_count(5)
    shoot(page, "timeline")

    page.locator("tr#v7 a.version").click()
    expect(page).to_have_url(site + "sessions/acme/t-1/versions/7")
    context = page.locator("#context")
    expect(context).to_contain_text("Question 0 about order #0.")
    expect(context.locator(".archive")).to_have_count(1)  # the archive made at version 6
    expect(page.locator("#state")).to_contain_text("Live buffer")
    shoot(page, "version")

    page.go_back()
    page.locator("tr#v8 input[name=from]").check()
    page.locator("tr#v13 input[name=to]").check()
    page.locator("button.compare-button").click()
    expect(page).to_have_url(site + "sessions/acme/t-1/diff?from=8&to=13")
    expect(page.locator("h1")).to_contain_text("version 8")
    expect(page.locator("main")).to_contain_text("Question 3 about order #3.")
    expect(page.locator('tr[data-counter="commit_count"] td').nth(2)).to_have_text("+1")
    shoot(page, "diff")


def test_a_new_event_appears_without_a_reload(
    page: Page, site: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """While the newest page is open, an event another writer records shows up by itself."""
    page.goto(site + "sessions/acme/t-1")
    expect(page.locator("tr.ev-row")).to_have_count(15)
    page.evaluate("window.__stillHere = true")
    other = make_ledger()  # another writer, as another process would be
    other.add_message(ALICE, "t-1", "assistant", "A live answer from elsewhere.")
    row = page.locator("tr#v16")
    expect(row).to_contain_text("A live answer from elsewhere.")
    expect(page.locator('[data-counter="version"]')).to_have_text("16")
    expect(page.locator('[data-counter="message_count"]')).to_have_text("11")
    assert page.evaluate("window.__stillHere") is True  # the same document: no reload


def test_a_tampered_database_shows_the_broken_link(
    page: Page, site: str, populated: SessionLedger, shoot: Callable[[Page, str], None]
) -> None:
    """verify shows an intact chain, then, after one stored byte changed, the first broken link."""
    page.goto(site + "sessions/acme/t-1")
    page.locator("h1 a.badge").click()
    expect(page.locator(".verdict.ok")).to_contain_text("The hash chain is intact")
    tamper(populated, 9)
    page.reload()
    expect(page.locator(".verdict.broken")).to_contain_text("First broken link: version 9")
    expect(page.locator("dd.reason")).to_have_text("hash mismatch")
    shoot(page, "verify-broken")
    page.goto(site)
    expect(page.locator('tr[data-key="t-1"] a.badge.broken')).to_have_text("✗ broken at v9")


def test_another_tenants_session_is_refused_in_the_browser(page: Page, site: str) -> None:
    """Editing the address to another account, its key, or an account parameter shows nothing
    of it: 403 or 404 pages."""
    for path, status in (
        ("sessions/globex/secret", 403),
        ("sessions/globex/secret/versions/2", 403),
        ("sessions/acme/secret", 404),
        ("sessions/acme/t-1?account_id=globex", 403),
        ("?account=globex", 403),
    ):
        response = page.goto(site + path)
        assert response is not None and response.status == status, path
        assert SECRET not in page.content()
    response = page.goto(site + "sessions/acme/t-1/versions/2")
    assert response is not None and response.status == 200


def test_html_in_a_message_is_shown_as_text_and_runs_nothing(page: Page, site: str) -> None:
    """A message holding <script> and <img onerror> renders as its characters; no script runs."""
    page.goto(site + "sessions/acme/t-1/versions/7")
    expect(page.locator("#state pre.content").filter(has_text="<script>")).to_have_text(EVIL)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0
    page.goto(site + "sessions/acme/t-1")
    expect(page.locator("tr#v7 .description")).to_contain_text("<script>window.__pwned")
    assert page.evaluate("window.__pwned") is None
