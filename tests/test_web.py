"""The web viewer over HTTP (Starlette's test client): read-only routes, the tenant rule,
escaping, the token and Host guards, paging, time travel, diff, verify and live rows."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient
from typer.testing import CliRunner

from chatledger import InvalidInput, InvalidSettings, Principal, SessionLedger
from chatledger.cli import app as cli_app
from chatledger.web import check_binding, create_app, is_loopback
from chatledger.web.charts import bar_chart, line_chart, nice_max, strip_chart
from chatledger.web.guard import segment, session_url, unsegment
from support import ADMIN, ALICE, FlakySummarizer
from web_support import SECRET, populate, tamper

Client = Callable[..., TestClient]


@pytest.fixture
def flaky() -> FlakySummarizer:
    return FlakySummarizer()


@pytest.fixture
def populated(make_ledger: Callable[..., SessionLedger], flaky: FlakySummarizer) -> SessionLedger:
    """The sample ledger of web_support.populate, read models caught up."""
    ledger = make_ledger(summarizer=flaky)
    populate(ledger, flaky)
    ledger.read_models.catch_up()
    return ledger


@pytest.fixture
def client(populated: SessionLedger) -> Iterator[Client]:
    """Test clients of the viewer of the populated ledger, as a given principal."""
    opened: list[TestClient] = []

    def make(principal: Principal = ALICE, **options: object) -> TestClient:
        options.setdefault("follow", False)
        app = create_app(populated, principal, **options)  # type: ignore[arg-type]
        test_client = TestClient(app, base_url="http://127.0.0.1:8765")
        opened.append(test_client)
        return test_client

    yield make
    for opened_client in opened:
        opened_client.close()


def versions(html: str) -> list[int]:
    """The versions of the event rows on a page, in order."""
    return [
        int(v) for v in re.findall(r'<tr id="v\d+" class="ev-row[^"]*" data-version="(\d+)"', html)
    ]


# ---------------------------------------------------------------- read-only
def _concrete(path: str) -> str:
    return path.replace("{account}", "acme").replace("{key}", "t-1").replace("{version:int}", "3")


def test_no_route_accepts_a_write_method(client: Client) -> None:
    """POST, PUT, DELETE and PATCH to every route (static files too) are refused with 405."""
    viewer = client()
    paths = [
        _concrete(r.path)
        for r in viewer.app.routes
        if isinstance(r, Route)  # type: ignore[attr-defined]
    ]
    assert len(paths) == 7
    mounts = [r for r in viewer.app.routes if isinstance(r, Mount)]  # type: ignore[attr-defined]
    paths += [m.path + "/viewer.css" for m in mounts]
    for path in paths:
        assert (
            viewer.get(path + ("?from=2&to=3" if path.endswith("/diff") else "")).status_code == 200
        ), path
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            response = viewer.request(method, path, content=b"x")
            assert response.status_code == 405, (method, path)


# ---------------------------------------------------------------- tenants
def test_a_member_can_never_open_another_accounts_session(client: Client) -> None:
    """Another account in the path or in any account parameter is 403; its key in the
    member's own account is 404; the other account's content is never in a response."""
    viewer = client(ALICE)
    for suffix in ("", "/events", "/versions/1", "/diff?from=1&to=2", "/verify"):
        response = viewer.get(f"/sessions/globex/secret{suffix}")
        assert response.status_code == 403, suffix
        assert SECRET not in response.text
        response = viewer.get(f"/sessions/acme/secret{suffix}")
        assert response.status_code == 404, suffix
        assert SECRET not in response.text
    for query in (
        "account=globex",
        "account_id=globex",
        "tenant=globex",
        "account=acme&account=globex",
    ):
        for path in ("/", "/sessions/acme/t-1", "/sessions/acme/t-1/versions/2"):
            response = viewer.get(f"{path}?{query}")
            assert response.status_code == 403, (path, query)
            assert SECRET not in response.text
    # The same key in the member's own account is the member's own session, never bob's.
    own = viewer.get("/sessions/acme/t-1")
    assert own.status_code == 200 and SECRET not in own.text
    listing = viewer.get("/?status=all")
    assert "globex" not in listing.text and "secret" not in listing.text


def test_an_admin_sees_every_account_and_can_filter_one(client: Client) -> None:
    """Admins list all accounts (or one with ?account=) and open any account's session."""
    viewer = client(ADMIN)
    listing = viewer.get("/")
    assert "globex" in listing.text and "acme" in listing.text
    only = viewer.get("/?account=globex")
    assert 'data-key="secret"' in only.text and 'data-key="t-1-retry"' not in only.text
    response = viewer.get("/sessions/globex/secret/versions/2")
    assert response.status_code == 200 and "bob&#39;s secret plan" in response.text
    assert viewer.get("/sessions/globex/secret/verify").status_code == 200


def test_the_viewer_starts_with_current_read_models(ledger: SessionLedger) -> None:
    """Following, the app catches the read models up before its first request, then follows."""
    ledger.add_message(ALICE, "fresh", "user", "recorded before the viewer started")
    app = create_app(ledger, ALICE)
    with TestClient(app, base_url="http://127.0.0.1") as viewer:
        assert 'data-key="fresh"' in viewer.get("/").text
        assert ledger.read_models.running
    assert not ledger.read_models.running


# ---------------------------------------------------------------- escaping
def test_html_in_message_content_is_shown_as_text_everywhere(client: Client) -> None:
    """A message holding <script> and <img onerror> is escaped on every page and in live rows."""
    viewer = client()
    escaped = "&lt;script&gt;window.__pwned = 1&lt;/script&gt;"
    pages = [
        viewer.get("/sessions/acme/t-1?around=7").text,
        viewer.get("/sessions/acme/t-1/versions/7").text,
        viewer.get("/sessions/acme/t-1/diff?from=6&to=8").text,
        viewer.get("/sessions/acme/t-1/events?after=6").json()["html"],
    ]
    for html in pages:
        assert "<script>window" not in html and "<img src=" not in html
        assert "onerror=" not in html.replace("onerror=&#34;", "")
    assert all(escaped in html for html in pages[1:3])
    assert "&lt;script&gt;" in pages[0] and "&lt;script&gt;" in pages[3]


def test_pages_load_nothing_from_other_hosts_and_forbid_inline_script(client: Client) -> None:
    """Every asset is served by the viewer itself; the CSP allows scripts from it only."""
    viewer = client()
    for path in ("/", "/sessions/acme/t-1", "/sessions/acme/t-1/versions/3"):
        response = viewer.get(path)
        assert not re.search(r'(src|href)="(https?:)?//', response.text), path
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        assert response.headers["x-frame-options"] == "DENY"
    assert "<svg" in viewer.get("/sessions/acme/t-1").text  # charts are inline SVG
    assert viewer.get("/static/viewer.js").status_code == 200


# ---------------------------------------------------------------- token and host
def test_a_token_is_required_from_every_request_when_set(client: Client) -> None:
    """Without the token 401; ?token= is exchanged for an HttpOnly cookie; Bearer works too."""
    token = "s3cret-token-of-some-length"
    viewer = client(token=token)
    assert viewer.get("/").status_code == 401
    assert viewer.get("/sessions/acme/t-1?token=wrong").status_code == 401
    assert viewer.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    first = viewer.get("/sessions/acme/t-1?token=" + token + "&before=9", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/sessions/acme/t-1?before=9"
    cookie = first.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert viewer.get("/sessions/acme/t-1").status_code == 200  # the cookie now
    bare = client(token=token)
    assert bare.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_a_loopback_viewer_refuses_foreign_host_headers(client: Client) -> None:
    """On loopback only loopback Host names pass (a DNS-rebinding page gets 400)."""
    viewer = client()
    assert viewer.get("/", headers={"Host": "attacker.example:8765"}).status_code == 400
    assert viewer.get("/", headers={"Host": "localhost:8765"}).status_code == 200
    assert viewer.get("/", headers={"Host": "[::1]:8765"}).status_code == 200
    assert client(allowed_hosts=None).get("/", headers={"Host": "any.example"}).status_code == 200


def test_serving_other_machines_needs_a_long_token() -> None:
    """A non-loopback host without a token, or a short token, is refused with a clear error."""
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    check_binding("127.0.0.1", None)
    check_binding("0.0.0.0", "x" * 16)
    with pytest.raises(InvalidSettings, match="needs a token"):
        check_binding("0.0.0.0", None)
    with pytest.raises(InvalidSettings, match="at least 16"):
        check_binding("127.0.0.1", "short")


def test_cli_serve_refuses_a_public_host_without_token(database_url: str) -> None:
    """`chatledger serve --host 0.0.0.0` without a token exits 2 (usage) with one line why."""
    result = CliRunner().invoke(
        cli_app, ["serve", "--url", database_url, "--host", "0.0.0.0"], env={}
    )
    assert result.exit_code == 2
    assert "needs a token" in result.output


def test_cli_serve_prints_its_address_serves_read_only_and_stops_on_ctrl_c(
    ledger: SessionLedger, database_url: str
) -> None:
    """`chatledger serve` prints the address it serves; the pages answer; SIGINT stops it."""
    ledger.add_message(ALICE, "t-1", "user", "hello from the CLI test")
    command = [sys.executable, "-m", "chatledger.cli", "serve", "--url", database_url,
               "--account", "acme", "--user", "alice", "--port", "0"]  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if not k.startswith("CHATLEDGER_")}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+/)", line)
        assert found, line + (process.stderr.read() if process.poll() is not None else "")
        with urllib.request.urlopen(found.group(1) + "sessions/acme/t-1/versions/2") as page:
            assert "hello from the CLI test" in page.read().decode()
        request = urllib.request.Request(found.group(1), method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)
        assert refused.value.code == 405
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0


def test_create_app_refuses_a_bad_principal_or_empty_token(ledger: SessionLedger) -> None:
    """Arguments are checked when the app is made, with typed errors."""
    with pytest.raises(InvalidInput):
        create_app(ledger, "alice")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        create_app(ledger, ALICE, token="")


# ---------------------------------------------------------------- pages
def test_the_timeline_marks_failures_merges_and_forks(client: Client) -> None:
    """A failed commit shows its error, a merge its sources, a fork links to its origin."""
    viewer = client()
    html = viewer.get("/sessions/acme/t-1").text
    assert versions(html) == list(range(1, 16))
    assert 'data-type="CommitFailed"' in html and "summarizer exploded" in html
    assert 'data-type="ArchiveMerged"' in html and "sources: " in html
    fork = viewer.get("/sessions/acme/t-1-retry").text
    assert 'class="origin" href="/sessions/acme/t-1/versions/5"' in fork
    assert 'data-counter="version">1<' in fork


def test_evictions_closes_and_reactivations_are_marked_with_their_reason(
    populated: SessionLedger, client: Client
) -> None:
    """An eviction shows its reason, a reactivation the status it left; the status pill follows."""
    populated.evict(ALICE, "t-1-retry", reason="idle", idle_seconds=7200)
    viewer = client()
    evicted = viewer.get("/sessions/acme/t-1-retry").text
    assert 'data-type="Evicted"' in evicted and "reason: idle" in evicted
    assert 'class="pill status-evicted" data-counter="status">evicted<' in evicted
    populated.add_message(ALICE, "t-1-retry", "user", "back again")
    populated.close_session(ALICE, "t-1-retry")
    html = viewer.get("/sessions/acme/t-1-retry").text
    assert 'data-type="Reactivated"' in html and "was evicted" in html
    assert 'data-type="Closed"' in html and 'data-counter="status">closed<' in html


def test_a_diff_over_too_many_versions_is_refused_with_a_reason(
    populated: SessionLedger, client: Client
) -> None:
    """A diff page never decodes a whole long session: over 20,000 versions apart is 400."""
    viewer = client()
    response = viewer.get("/sessions/acme/t-1/diff?from=1&to=20002")
    assert response.status_code == 400 and "closer together" in response.text


def test_the_forks_page_links_an_origin_to_its_forks(client: Client) -> None:
    """The origin lists its fork with the version it was taken at; a fork-less session none."""
    viewer = client()
    html = viewer.get("/sessions/acme/t-1/forks").text
    assert re.findall(r'class="fork-row" data-key="([^"]+)"', html) == ["t-1-retry"]
    assert 'href="/sessions/acme/t-1/versions/5">version 5</a>' in html
    assert "No session was forked" in viewer.get("/sessions/acme/t-1-retry/forks").text
    assert viewer.get("/sessions/globex/t-1/forks").status_code == 403


def test_a_long_session_is_paged_from_the_newest_events(
    populated: SessionLedger, client: Client
) -> None:
    """The first page holds the newest events; older/newer/around move the window."""
    populated.add_messages(
        ALICE, "long", [{"role": "user", "content": f"m{i}"} for i in range(249)]
    )
    viewer = client(page_size=100)
    assert versions(viewer.get("/sessions/acme/long").text) == list(range(151, 251))
    assert versions(viewer.get("/sessions/acme/long?before=151").text) == list(range(51, 151))
    assert versions(viewer.get("/sessions/acme/long?after=200").text) == list(range(201, 251))
    assert versions(viewer.get("/sessions/acme/long?around=10").text) == list(range(1, 101))
    assert versions(viewer.get("/sessions/acme/long?around=120").text) == list(range(70, 170))
    newest = viewer.get("/sessions/acme/long").text
    assert 'data-live-url="/sessions/acme/long/events"' in newest
    assert "data-live-url" not in viewer.get("/sessions/acme/long?before=151").text
    assert "Charts show 150 evenly spaced versions of 250" in newest


def test_live_rows_are_the_events_after_a_version(populated: SessionLedger, client: Client) -> None:
    """/events?after=N returns the rows recorded after N and the counters after the last."""
    viewer = client()
    assert viewer.get("/sessions/acme/t-1/events?after=15").json() == {
        "after": 15,
        "html": "",
        "counters": {},
        "more": False,
    }
    populated.add_message(ALICE, "t-1", "assistant", "A new answer arrives.")
    data = viewer.get("/sessions/acme/t-1/events?after=15").json()
    assert data["after"] == 16 and versions(data["html"]) == [16]
    assert "A new answer arrives." in data["html"]
    assert data["counters"]["version"] == "16" and data["counters"]["message_count"] == "11"


def test_a_version_page_shows_the_state_and_prompt_context_as_of_it(client: Client) -> None:
    """Version 5 shows the buffer of 4 messages and the context the agent had then."""
    viewer = client()
    html = viewer.get("/sessions/acme/t-1/versions/5").text
    state = html[html.index('id="state"') :]
    context = html[html.index('id="context"') : html.index('id="state"')]
    assert "4 messages" in state and "Question 1 about order #1." in state
    assert "Question 0 about order #0." in context and "Question 2" not in context
    assert "archive summary" in viewer.get("/sessions/acme/t-1/versions/11").text
    tight = viewer.get("/sessions/acme/t-1/versions/13?budget=3").text
    tight = tight[tight.index('id="context"') : tight.index('id="state"')]
    assert "archive summary" not in tight and "1 live messages did not fit" in tight
    assert viewer.get("/sessions/acme/t-1/versions/99").status_code == 400
    assert viewer.get("/sessions/acme/t-1/versions/3?budget=-1").status_code == 400


def test_a_diff_page_lists_what_changed_between_two_versions(client: Client) -> None:
    """Messages added, commits, failed commits and counters at both ends (order-insensitive)."""
    viewer = client()
    html = viewer.get("/sessions/acme/t-1/diff?from=15&to=8").text  # swapped: still 8 -> 15
    assert "version 8</a> &rarr;" in html
    assert "Question 3 about order #3." in html and "Question 4 about order #4." in html
    assert "summarizer exploded" in html and "Commits (1)" in html
    assert re.search(
        r'data-counter="commit_count"><th>commits</th><td class="num">1</td>'
        r'<td class="num">2</td>',
        html,
    )
    assert viewer.get("/sessions/acme/t-1/diff?from=2").status_code == 400
    assert viewer.get("/sessions/acme/t-1/diff?from=x&to=2").status_code == 400


def test_verify_shows_the_first_broken_link_of_a_tampered_session(
    populated: SessionLedger, client: Client
) -> None:
    """An intact chain verifies; after one stored byte changes, the page names that version,
    and the list's badge shows the outcome."""
    viewer = client()
    assert "The hash chain is intact" in viewer.get("/sessions/acme/t-1/verify").text
    assert "&#10003; chain intact" in viewer.get("/").text
    tamper(populated, 9)
    html = viewer.get("/sessions/acme/t-1/verify").text
    assert "First broken link: version 9" in html and "hash mismatch" in html
    assert "broken at v9" in viewer.get("/").text
    assert "broken at v9" in viewer.get("/sessions/acme/t-1").text


def test_the_sessions_list_filters_sorts_pages_and_verifies(
    populated: SessionLedger, client: Client
) -> None:
    """Search, status and order change the rows; pages hold list_size rows; ?verify=1 badges."""
    populated.evict(ALICE, "t-1-retry")
    for i in range(4):
        populated.add_message(ALICE, f"extra-{i}", "user", "x" * (10 * (i + 1)))
    populated.read_models.catch_up()
    viewer = client(list_size=3)

    def keys(query: str) -> list[str]:
        return re.findall(r'class="session-row" data-key="([^"]+)"', viewer.get("/?" + query).text)

    assert keys("") == ["extra-3", "extra-2", "extra-1"]
    assert keys("page=2") == ["extra-0", "t-1"]
    assert keys("status=evicted") == ["t-1-retry"]
    assert keys("q=T-1&status=all") == ["t-1-retry", "t-1"]
    assert keys("order=pending_tokens")[0] == "t-1" or keys("order=pending_tokens")[0] == "extra-3"
    assert keys("order=key") == ["extra-0", "extra-1", "extra-2"]
    assert viewer.get("/?order=size").status_code == 400
    assert viewer.get("/?page=0").status_code == 400
    verified = viewer.get("/?verify=1").text
    assert verified.count("&#10003; chain intact") == 3


def test_keys_with_slashes_and_percent_signs_have_working_urls(
    populated: SessionLedger, client: Client
) -> None:
    """Any valid key (with '/', '%', spaces) gets a URL that opens exactly that session."""
    key = "team/a b%2F?#"
    populated.add_message(ALICE, key, "user", "odd key")
    viewer = client()
    url = session_url("acme", key)
    assert url.count("/") == 3 and "%" not in url
    assert segment("ticket-42") == "ticket-42" and unsegment(segment(key)) == key
    assert segment("~x") != "~x" and unsegment(segment("~x")) == "~x"
    assert viewer.get("/sessions/acme/~%25%25").status_code == 400
    assert "odd key" in viewer.get(url + "/versions/2").text
    assert versions(viewer.get(url).text) == [1, 2]


# ---------------------------------------------------------------- charts
def test_charts_scale_points_into_the_plot_and_link_each_one() -> None:
    """Line charts map values into the plot box; dots link; empty input gives an empty chart."""
    chart = line_chart("t", "c", [1, 2, 3], [("a", "s-a", [0, 5, 10])], hrefs=["#1", "#2", "#3"])
    x0, y0, x1, y1 = chart.plot
    xs = [d.x for d in chart.dots]
    ys = [d.y for d in chart.dots]
    assert xs[0] == x0 and xs[-1] == x1 and ys[0] == y1 and ys[-1] == y0
    assert [d.href for d in chart.dots] == ["#1", "#2", "#3"]
    assert line_chart("t", "c", [], []).empty and strip_chart("t", "c", []).empty
    assert bar_chart("t", "c", [("tool", [(3.0, "p", "prompt"), (7.0, "c", "completion")])]).bars
    assert [nice_max(v) for v in (0, 1, 3, 10, 11, 999)] == [1, 1, 5, 10, 20, 1000]
