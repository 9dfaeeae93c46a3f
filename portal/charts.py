"""Line charts over time, drawn on the server as SVG, like the ledger's bars (billing/summary.py): no
script, no chart library, colours from the stylesheet by class, so they follow dark mode. A chart has
a title and a description for a screen reader, and the page puts its figures in a table beside it.

A series is a list of (when, value) points. One point is drawn as a dot; a chart with no point at all
is not drawn (the page says why instead)."""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

# The chart's box, and the room left of it for the values and under it for the times. Narrow and with large
# type, so that it still reads at 390 px, where it is drawn at about two thirds of its size.
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 480, 184, 46, 28, 10, 10
MOST_POINTS = 120  # a series is averaged into at most this many points of time

Point = tuple[datetime, float]


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # its class in the stylesheet: its colour
    points: list[Point]
    area: bool = False  # filled down to zero (what is held), or a line (what is used)


def nice_top(value: float) -> float:
    """The value axis's top, so that it and its half read as round figures: up to 10, the next even whole
    number (2 at least); past it, the largest value rounded up to 1, 1.2, 1.5, 2, 3, 4, 5, 6 or 8 times a
    power of ten."""
    if value <= 10:
        return float(max(2, 2 * math.ceil(value / 2)))
    power = 10 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 1.2, 1.5, 2, 3, 4, 5, 6, 8, 10) if value <= step * power))


def averaged(points: Sequence[Point], start: datetime, end: datetime, most: int = MOST_POINTS) -> list[Point]:
    """The points averaged over at most `most` equal spans of [start, end], each at its span's middle;
    as they are when there are no more than `most`."""
    if len(points) <= most or end <= start:
        return list(points)
    span = (end - start) / most
    sums: dict[int, list[float]] = {}
    for at, value in points:
        slot = min(most - 1, max(0, int((at - start) / span)))
        sums.setdefault(slot, []).append(value)
    return [(start + span * (slot + 0.5), sum(values) / len(values)) for slot, values in sorted(sums.items())]


def latest(points: Sequence[Point], start: datetime, end: datetime, most: int = MOST_POINTS) -> list[Point]:
    """The last of the points in each of at most `most` equal spans of [start, end] (for a running total, whose
    last value in a span is the one to keep), and the first point; as they are when there are no more than `most`."""
    if len(points) <= most or end <= start:
        return list(points)
    span = (end - start) / most
    kept: dict[int, Point] = {}
    for at, value in points:
        kept[min(most - 1, max(0, int((at - start) / span)))] = (at, value)
    return [points[0], *(point for point in kept.values() if point != points[0])]


def time_label(at: datetime, span: timedelta) -> str:
    return f"{at:%H:%M:%S}" if span < timedelta(minutes=10) else f"{at:%H:%M}"


def line_chart(
    slug: str,
    title: str,
    description: str,
    series: Sequence[Series],
    start: datetime,
    end: datetime,
    top: float | None = None,
    shown: Callable[[float], str] = lambda value: f"{value:g}",
) -> SafeString:
    """The series over [start, end] (UTC), values from zero to `top` (by default the largest, rounded up);
    empty when no series has a point. `slug` makes the ids of its title and description unique on a page."""
    if not any(s.points for s in series):
        return SafeString("")
    if end <= start:
        end = start + timedelta(seconds=1)
    top = top or nice_top(max(value for s in series for _, value in s.points))
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(at: datetime) -> float:
        return LEFT + inner_w * min(1.0, max(0.0, (at - start) / (end - start)))

    def y(value: float) -> float:
        return TOP + inner_h * (1 - min(1.0, max(0.0, value / top)))

    grid = format_html_join(
        "",
        '<line class="grid" x1="{0}" y1="{1}" x2="{2}" y2="{1}"></line><text class="y" x="{3}" y="{4}">{5}</text>',
        ((LEFT, f"{y(v):.1f}", WIDTH - RIGHT, LEFT - 4, f"{y(v) + 4:.1f}", shown(v)) for v in (0, top / 2, top)),
    )
    span = end - start
    times = format_html_join(
        "",
        '<text class="x {2}" x="{0}" y="{1}">{3}</text>',
        (
            (f"{x(at):.1f}", HEIGHT - 6, anchor, time_label(at, span))
            for at, anchor in ((start, "start"), (start + span / 2, "middle"), (end, "end"))
        ),
    )
    drawn = format_html_join("", "{}", ((_drawn(s, x, y, HEIGHT - BOTTOM),) for s in series if s.points))
    return format_html(
        '<svg class="chart line-chart" viewBox="0 0 {} {}" role="img" aria-labelledby="{}-title {}-desc" '
        'data-top="{}" data-start="{}" data-end="{}">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}{}{}</svg>',
        WIDTH, HEIGHT, slug, slug, top, start.isoformat(), end.isoformat(),
        slug, title, slug, description, grid, drawn, times,
    )  # fmt: skip


def _drawn(series: Series, x, y, baseline: float) -> SafeString:
    """A series as a polyline (and the area under it when it is filled), or a dot when it has one point."""
    points = " ".join(f"{x(at):.1f},{y(value):.1f}" for at, value in series.points)
    if len(series.points) == 1:
        at, value = series.points[0]
        return format_html(
            '<circle class="{}" data-series="{}" cx="{}" cy="{}" r="4"></circle>',
            series.css, series.name, f"{x(at):.1f}", f"{y(value):.1f}",
        )  # fmt: skip
    area = ""
    if series.area:
        first, last = x(series.points[0][0]), x(series.points[-1][0])
        outline = f"{first:.1f},{baseline:.1f} {points} {last:.1f},{baseline:.1f}"
        area = format_html('<polygon class="{} area" points="{}"></polygon>', series.css, outline)
    return format_html(
        '{}<polyline class="{}" data-series="{}" points="{}"></polyline>', area, series.css, series.name, points
    )
