"""Charts as geometry for inline SVG, computed on the server (no script, no network).

Each function turns a few series into a ``Chart``: polylines, dots (each a link),
bars and axis ticks in the chart's own coordinates; the ``charts.html``
template draws it. Long sessions arrive here already downsampled
(``ReadModels.timeline_sample``), so a chart has at most a few hundred points
whatever the session's length. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from chatledger.results import TimelineEntry, ToolUsage

WIDTH = 520
HEIGHT = 170
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 14, 26  # plot margins


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class Line:
    name: str
    css: str
    points: str  # "x,y x,y ..." in chart coordinates


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    css: str
    href: str
    title: str


@dataclass(frozen=True)
class Bar:
    label: str
    y: float
    height: float
    parts: tuple[tuple[float, float, str, str], ...]  # (x, width, css, title)
    total: str


@dataclass(frozen=True)
class Chart:
    title: str
    caption: str
    kind: str = "line"  # line, strip (marks on a time axis) or bars
    width: int = WIDTH
    height: int = HEIGHT
    lines: tuple[Line, ...] = ()
    dots: tuple[Dot, ...] = ()
    bars: tuple[Bar, ...] = ()
    x_ticks: tuple[Tick, ...] = ()
    y_ticks: tuple[Tick, ...] = ()
    legend: tuple[tuple[str, str], ...] = ()  # (css, name)
    plot: tuple[float, float, float, float] = field(
        default=(LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)
    )

    @property
    def empty(self) -> bool:
        return not (self.lines or self.dots or self.bars)


def nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


def compact(value: float) -> str:
    """A short number label: 950, 1.2k, 3.4M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            text = f"{value / limit:.1f}".rstrip("0").rstrip(".")
            return f"{text}{suffix}"
    return f"{value:g}"


def whole(value: float) -> str:
    """A label for a count or version: 12,345."""
    return f"{round(value):,}"


def time_label(span_seconds: float) -> Callable[[float], str]:
    """A formatter for POSIX timestamps, precise enough for a span of this length."""
    pattern = "%H:%M:%S" if span_seconds < 86_400 else "%m-%d %H:%M"

    def label(stamp: float) -> str:
        return datetime.fromtimestamp(stamp, UTC).strftime(pattern)

    return label


def _scale(low: float, high: float, start: float, end: float) -> Callable[[float], float]:
    span = high - low or 1.0

    def to(value: float) -> float:
        return round(start + (value - low) / span * (end - start), 1)

    return to


def _ticks(low: float, high: float, count: int) -> list[float]:
    if high <= low:
        return [low]
    return [low + (high - low) * i / (count - 1) for i in range(count)]


def line_chart(
    title: str,
    caption: str,
    xs: Sequence[float],
    series: Sequence[tuple[str, str, Sequence[float]]],
    *,
    hrefs: Sequence[str] = (),
    titles: Sequence[str] = (),
    x_format: Callable[[float], str] = whole,
    step: bool = False,
) -> Chart:
    """Lines of ``(name, css class, ys)`` over ``xs``; with ``hrefs`` the first series
    gets a dot per point linking there. ``step`` draws a staircase (counters)."""
    if not xs:
        return Chart(title=title, caption=caption)
    x0, y0, x1, y1 = LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM
    low, high = min(xs), max(xs)
    top = nice_max(max((max(ys, default=0) for _, _, ys in series), default=0))
    sx = _scale(low, high, x0, x1)
    sy = _scale(0, top, y1, y0)
    lines = []
    for name, css, ys in series:
        coords: list[str] = []
        previous: float | None = None
        for x, y in zip(xs, ys, strict=True):
            if step and previous is not None:
                coords.append(f"{sx(x)},{sy(previous)}")
            coords.append(f"{sx(x)},{sy(y)}")
            previous = y
        lines.append(Line(name=name, css=css, points=" ".join(coords)))
    dots: list[Dot] = []
    if hrefs and series:
        _, css, ys = series[0]
        dots = [
            Dot(x=sx(x), y=sy(y), css=css, href=href, title=label)
            for x, y, href, label in zip(xs, ys, hrefs, titles or [""] * len(xs), strict=True)
        ]
    x_ticks = tuple(Tick(sx(v), x_format(v)) for v in _ticks(low, high, 5))
    y_ticks = tuple(Tick(sy(v), compact(v)) for v in (0, top / 2, top))
    return Chart(
        title=title,
        caption=caption,
        lines=tuple(lines),
        dots=tuple(dots),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        legend=tuple((css, name) for name, css, _ in series),
    )


def strip_chart(
    title: str,
    caption: str,
    marks: Sequence[tuple[float, str, str, str]],
    *,
    x_format: Callable[[float], str] | None = None,
) -> Chart:
    """Marks ``(time, css class, href, title)`` on a time axis: the events of a window."""
    if not marks:
        return Chart(title=title, caption=caption, kind="strip", height=64)
    height = 64
    x0, x1 = LEFT, WIDTH - RIGHT
    times = [m[0] for m in marks]
    low, high = min(times), max(times)
    fmt = x_format or time_label(high - low)
    sx = _scale(low, high, x0, x1)
    dots = tuple(
        Dot(x=sx(t), y=22.0, css=css, href=href, title=label) for t, css, href, label in marks
    )
    ticks = tuple(Tick(sx(v), fmt(v)) for v in _ticks(low, high, 4))
    return Chart(
        title=title,
        caption=caption,
        kind="strip",
        height=height,
        dots=dots,
        x_ticks=ticks,
        plot=(x0, 8, x1, height - BOTTOM),
    )


def bar_chart(
    title: str,
    caption: str,
    rows: Sequence[tuple[str, Sequence[tuple[float, str, str]]]],
) -> Chart:
    """Horizontal stacked bars: ``(label, [(value, css class, part name), ...])`` per row."""
    if not rows:
        return Chart(title=title, caption=caption, kind="bars", height=40)
    row_height, gap = 18, 6
    left = 140
    height = TOP + len(rows) * (row_height + gap) + BOTTOM
    top = nice_max(max(sum(v for v, _, _ in parts) for _, parts in rows))
    sx = _scale(0, top, left, WIDTH - RIGHT)
    bars = []
    for index, (label, parts) in enumerate(rows):
        y = TOP + index * (row_height + gap)
        x = float(left)
        pieces = []
        for value, css, name in parts:
            width = sx(value) - left
            pieces.append((x, width, css, f"{name}: {value:,.0f}"))
            x += width
        total = sum(v for v, _, _ in parts)
        bars.append(
            Bar(label=label, y=y, height=row_height, parts=tuple(pieces), total=compact(total))
        )
    ticks = tuple(Tick(sx(v), compact(v)) for v in (0, top / 2, top))
    legend = []
    for _, css, name in rows[0][1]:
        legend.append((css, name))
    return Chart(
        title=title,
        caption=caption,
        kind="bars",
        height=height,
        bars=tuple(bars),
        x_ticks=ticks,
        legend=tuple(legend),
        plot=(left, TOP, WIDTH - RIGHT, height - BOTTOM),
    )


def session_charts(
    sample: Sequence[TimelineEntry], usage: Sequence[ToolUsage], around_url: str
) -> tuple[Chart, ...]:
    """The charts of a session: buffer by version, commits over time, tool tokens."""
    versions = [float(e.version) for e in sample]
    hrefs = [around_url.format(v=e.version) for e in sample]
    titles = [
        f"v{e.version} {e.event_type}: {e.pending_tokens:,} pending tokens, "
        f"{e.turn_count} user turns in the buffer"
        for e in sample
    ]
    buffer = line_chart(
        "Pending tokens across versions",
        "Tokens in the live buffer (not yet committed) after each version; "
        "click a point to open the events around it.",
        versions,
        [
            ("pending tokens", "s-tokens", [float(e.pending_tokens) for e in sample]),
        ],
        hrefs=hrefs,
        titles=titles,
    )
    turns = line_chart(
        "Buffer size across versions",
        "User turns waiting in the live buffer (they leave it when a commit archives them).",
        versions,
        [("user turns", "s-turns", [float(e.turn_count) for e in sample])],
        hrefs=hrefs,
        titles=titles,
    )
    stamps = [e.timestamp.timestamp() for e in sample]
    span = (max(stamps) - min(stamps)) if stamps else 0.0
    commits = line_chart(
        "Commits over time",
        "Commits recorded so far (archives made from the buffer), by time.",
        stamps,
        [
            ("commits", "s-commits", [float(e.commit_count) for e in sample]),
            ("live archives", "s-archives", [float(e.archive_count) for e in sample]),
        ],
        hrefs=hrefs,
        titles=[
            f"v{e.version} at {e.timestamp:%Y-%m-%d %H:%M:%S}: {e.commit_count} commits"
            for e in sample
        ],
        x_format=time_label(span),
        step=True,
    )
    tools = bar_chart(
        "Tool tokens per tool",
        "Prompt and completion tokens reported by tool calls in this session.",
        [
            (
                u.tool_name,
                [
                    (float(u.prompt_tokens), "s-prompt", "prompt tokens"),
                    (float(u.completion_tokens), "s-completion", "completion tokens"),
                ],
            )
            for u in sorted(usage, key=lambda u: -u.total_tokens)[:12]
        ],
    )
    return (buffer, turns, commits, tools)
