"""First paint of the web viewer: a 100,000-event timeline vs a 100-event one, and a
10,000-session list vs a 100-session one, measured the same way in the same run.

Builds (through the public API, ``add_messages`` in batches of 1,000 with a commit
after each batch, a tenth of the messages carrying tool-call data):

* a timeline ledger with one session of ``--events`` events (default 100,000) and one
  of 100 events;
* a list ledger with ``--sessions`` sessions (default 10,000) and another with 100.

Then serves each ledger with ``chatledger.web`` (uvicorn on loopback, as ``chatledger
serve`` runs it, as an admin) and measures **first paint**: the time from sending the
request for the page to having received the page's HTML (its charts are inline SVG)
plus the stylesheet and the script it loads, over one keep-alive HTTP connection.
Rounds alternate short and long so both see the same machine load; the first rounds
warm up. It prints medians with the 10th-90th percentile spread and the ratio
long/short of the medians (target: at most 2x). ``--browser`` also measures
Chromium's first contentful paint of each page (needs Debian's chromium and the
``playwright`` package).

Run::

    python benchmarks/bench_viewer.py                 # SQLite in a temporary folder
    python benchmarks/bench_viewer.py --rounds 30 --browser
    python benchmarks/bench_viewer.py --events 20000 --sessions 2000   # quicker
"""

from __future__ import annotations

import argparse
import http.client
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import console, provenance
from rich.table import Table

from chatledger import Principal, SessionLedger
from chatledger.web import ViewerServer, create_app

TARGET = 2.0
WRITER = Principal(account_id="bench", user_id="writer", agent_id="bench")
ADMIN = Principal(account_id="ops", user_id="bench", agent_id="viewer", role="admin")
ASSETS = ("/static/viewer.css", "/static/viewer.js")
TOOL = {"tool_name": "search", "prompt_tokens": 120, "completion_tokens": 30}


def grow(ledger: SessionLedger, key: str, events: int, rng: random.Random) -> None:
    """Append about ``events`` events to ``key``: batches of up to 1,000 messages, each
    followed by a commit."""
    remaining = events - 1  # the Started event
    batch_number = 0
    while remaining > 1:
        size = min(1000, remaining - 1)
        batch = [
            {
                "role": "user" if i % 3 == 0 else "assistant",
                "content": f"message {batch_number}-{i}: " + "lorem ipsum " * rng.randint(1, 8),
            }
            | ({"role": "tool", "tool_call": TOOL} if rng.random() < 0.1 else {})
            for i in range(size)
        ]
        ledger.add_messages(WRITER, key, batch)
        ledger.commit(WRITER, key)
        remaining -= size + 1
        batch_number += 1


def build_timelines(url: str, events: int) -> None:
    rng = random.Random(7)
    started = time.perf_counter()
    with SessionLedger(url) as ledger:
        grow(ledger, "short", 100, rng)
        grow(ledger, "long", events, rng)
        long_version = ledger.read_models.timeline(WRITER, "long", newest=True, limit=1)[0].version
        short_version = ledger.read_models.timeline(WRITER, "short", newest=True, limit=1)[
            0
        ].version
    console.print(
        f"timeline ledger: sessions of {long_version:,} and {short_version:,} events "
        f"built in {time.perf_counter() - started:.1f}s"
    )


def build_list(url: str, sessions: int) -> None:
    started = time.perf_counter()
    with SessionLedger(url) as ledger:
        for n in range(sessions):
            who = Principal(account_id=f"tenant{n % 8}", user_id="u", agent_id="bench")
            ledger.add_messages(
                who,
                f"session-{n:05d}",
                [{"role": "user", "content": f"hello {n}"}, {"role": "assistant", "content": "hi"}],
            )
        ledger.read_models.catch_up()
    console.print(
        f"list ledger: {sessions:,} sessions built in {time.perf_counter() - started:.1f}s"
    )


class Fetcher:
    """GETs over one keep-alive connection; ``paint`` times a page and its assets."""

    def __init__(self, server: ViewerServer) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)

    def get(self, path: str) -> int:
        self.connection.request("GET", path)
        response = self.connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:300]!r}")
        return len(body)

    def paint(self, path: str) -> tuple[float, int]:
        started = time.perf_counter()
        size = self.get(path)
        for asset in ASSETS:
            self.get(asset)
        return time.perf_counter() - started, size

    def close(self) -> None:
        self.connection.close()


def measure(
    pairs: list[tuple[str, Fetcher, str]], rounds: int, warmup: int
) -> dict[str, list[float]]:
    """Time every (label, fetcher, path) once per round, in alternating order."""
    times: dict[str, list[float]] = {label: [] for label, _, _ in pairs}
    for round_number in range(warmup + rounds):
        order = pairs if round_number % 2 == 0 else list(reversed(pairs))
        for label, fetcher, path in order:
            elapsed, _ = fetcher.paint(path)
            if round_number >= warmup:
                times[label].append(elapsed)
    return times


def spread(values: list[float]) -> str:
    deciles = statistics.quantiles(values, n=10)
    return f"{deciles[0] * 1000:.1f}-{deciles[-1] * 1000:.1f}"


def browser_paint(urls: dict[str, str], rounds: int) -> dict[str, list[float]]:
    """Chromium's first contentful paint (ms after navigation start) of each page."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
    found: dict[str, list[float]] = {label: [] for label in urls}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        page = browser.new_page()
        for round_number in range(rounds + 1):
            for label, url in urls.items():
                page.goto(url, wait_until="load")
                fcp = None
                deadline = time.monotonic() + 10
                while fcp is None and time.monotonic() < deadline:  # reported just after paint
                    fcp = page.evaluate(
                        "performance.getEntriesByName('first-contentful-paint')[0]?.startTime"
                        " ?? null"
                    )
                    time.sleep(0.01 if fcp is None else 0)
                if fcp is None:
                    raise RuntimeError(f"Chromium reported no first contentful paint for {url}")
                if round_number > 0:  # the first round warms the cache and the server
                    found[label].append(float(fcp) / 1000)
        browser.close()
    return found


def report(title: str, times: dict[str, list[float]], pairs: list[tuple[str, str]]) -> None:
    table = Table(title=title)
    table.add_column("page")
    table.add_column("median ms", justify="right")
    table.add_column("p10-p90 ms", justify="right")
    for label, values in times.items():
        table.add_row(label, f"{statistics.median(values) * 1000:.1f}", spread(values))
    console.print(table)
    for long_label, short_label in pairs:
        ratio = statistics.median(times[long_label]) / statistics.median(times[short_label])
        verdict = "[green]ok[/]" if ratio <= TARGET else "[red]over target[/]"
        console.print(
            f"  {long_label} / {short_label}: {ratio:.2f}x (target <= {TARGET:g}x) {verdict}"
        )


def serve(url: str) -> tuple[SessionLedger, ViewerServer]:
    ledger = SessionLedger(url, create_tables=False)
    app = create_app(ledger, ADMIN, follow=False)
    return ledger, ViewerServer(app, "127.0.0.1", 0).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--browser", action="store_true", help="also Chromium's first paint")
    parser.add_argument("--keep", type=Path, help="build in (and keep) this folder")
    options = parser.parse_args()
    folder = options.keep or Path(tempfile.mkdtemp(prefix="bench-viewer-"))
    folder.mkdir(parents=True, exist_ok=True)
    console.print(f"bench_viewer ({provenance()}), databases in {folder}")
    timeline_url = f"sqlite:///{folder / f'timeline-{options.events}.db'}"
    big_url = f"sqlite:///{folder / f'list-{options.sessions}.db'}"
    small_url = f"sqlite:///{folder / 'list-100.db'}"
    builds: list[tuple[str, Callable[[], None]]] = [
        (timeline_url, lambda: build_timelines(timeline_url, options.events)),
        (big_url, lambda: build_list(big_url, options.sessions)),
        (small_url, lambda: build_list(small_url, 100)),
    ]
    for url, build in builds:
        if not Path(url.removeprefix("sqlite:///")).exists():
            build()
    opened = [serve(url) for url in (timeline_url, big_url, small_url)]
    (_, timeline), (_, big), (_, small) = opened
    fetchers = [Fetcher(server) for _, server in opened]
    try:
        events = f"{options.events // 1000}k"
        session_pages = [
            ("timeline 100", fetchers[0], "/sessions/bench/short"),
            (f"timeline {events}", fetchers[0], "/sessions/bench/long"),
        ]
        list_pages = [
            ("list 100", fetchers[2], "/"),
            (f"list {options.sessions:,}", fetchers[1], "/"),
        ]
        for label, fetcher, path in session_pages + list_pages:
            _, size = fetcher.paint(path)
            console.print(f"{label}: {size:,} bytes of HTML")
        times = measure(session_pages + list_pages, options.rounds, options.warmup)
        report(
            f"First paint over HTTP (page + {len(ASSETS)} assets), {options.rounds} rounds",
            times,
            [(f"timeline {events}", "timeline 100"), (f"list {options.sessions:,}", "list 100")],
        )
        if options.browser:
            urls = {
                "timeline 100": timeline.url + "sessions/bench/short",
                f"timeline {events}": timeline.url + "sessions/bench/long",
                "list 100": small.url,
                f"list {options.sessions:,}": big.url,
            }
            painted = browser_paint(urls, max(5, options.rounds // 3))
            report(
                "Chromium first contentful paint",
                painted,
                [
                    (f"timeline {events}", "timeline 100"),
                    (f"list {options.sessions:,}", "list 100"),
                ],
            )
    finally:
        for fetcher in fetchers:
            fetcher.close()
        for ledger, server in opened:
            server.stop()
            ledger.close()
        if options.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
