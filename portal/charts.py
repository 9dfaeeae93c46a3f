"""Line charts over time, drawn on the server as SVG, like the ledger's bars (billing/summary.py): no
script, no chart library, colours from the stylesheet by class, so they follow dark mode. A chart has
a title and a description for a screen reader, and the page puts its figures in a table beside it.

A series is a list of (when, value) points, each an instant or the middle of a span it stands for (a bucket of
figures averaged). Its line runs on, flat, to the outer bounds of its first and last spans, so that one point is
a line across its span; a lone instant is held from it to the chart's end. A chart with no point at all is not
drawn (the page says why instead).

The time axis is marked at round times, a tenth of a second to 30 days apart (TIME_STEPS): the finest step whose
labels fit side by side at a phone's size, each label as precise as its step, no two alike, two marks at least
(where no step's round times give two that fit, the start and the end are the marks)."""

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from functools import partial

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

# The chart's box, and the room left of it for the values and under it for the times. Narrow and with large
# type, so that it still reads at 390 px, where it is drawn at about two thirds of its size.
WIDTH, HEIGHT, LEFT, BOTTOM, TOP, RIGHT = 480, 184, 46, 28, 10, 10
MOST_POINTS = 120  # a series is averaged into at most this many points of time
SHORTEST = timedelta(seconds=1)  # a chart spans at least this long

# The time axis's steps, finest first. A label's width is reckoned at a phone's 18 px (the stylesheet's size
# there), 0.6 of it a character; labels keep LABEL_GAP apart.
TIME_STEPS = [
    *(timedelta(milliseconds=n) for n in (100, 200, 500)),
    *(timedelta(seconds=n) for n in (1, 2, 5, 10, 15, 30)),
    *(timedelta(minutes=n) for n in (1, 2, 5, 10, 15, 30)),
    *(timedelta(hours=n) for n in (1, 2, 3, 6, 12)),
    *(timedelta(days=n) for n in (1, 2, 5, 10, 30)),
]
CHARACTER_WIDTH, LABEL_GAP = 0.6 * 18, 8
MOST_TICKS = 8  # more of the shortest label would not fit
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Point = tuple[datetime, float]


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # its class in the stylesheet: its colour
    points: list[Point]
    area: bool = False  # filled down to zero (what is held), or a line (what is used)
    span: timedelta = timedelta(0)  # the time each point stands for, around it: its bucket; none, an instant


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


def time_ticks(start: datetime, end: datetime) -> list[tuple[datetime, str]]:
    """The time axis's marks over [start, end]: the round times of the finest step in TIME_STEPS that gives two
    marks or more whose labels fit side by side and differ, each with its label. Where no step does (the two
    round times of one fall too near an edge to fit, and a coarser has one at most), the start and the end,
    each labelled as precisely as tells them apart. None for an empty span."""
    if end <= start:
        return []
    for step in TIME_STEPS:
        if (end - start) / step > MOST_TICKS:
            continue
        ticks = _round_times(start, end, step)
        labels = [_time_label(at, step) for at in ticks]
        if len(set(labels)) < len(labels):  # hours over more than a day: each says its day
            labels = [f"{at.day} {at:%b %H:%M}" for at in ticks]
        if len(ticks) >= 2 and len(set(labels)) == len(labels) and _fit(ticks, labels, start, end):
            return list(zip(ticks, labels, strict=True))
    return _ends(start, end)


def _ends(start: datetime, end: datetime) -> list[tuple[datetime, str]]:
    """The start and the end as the axis's two marks, labelled at the finest step whose labels tell them apart."""
    for step in TIME_STEPS:
        labels = [_time_label(at, step) for at in (start, end)]
        if labels[0] != labels[1]:
            return [(start, labels[0]), (end, labels[1])]
    return [(at, f"{at:%Y-%m-%d}") for at in (start, end)]


def _round_times(start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    """The whole multiples of `step` since 1970 (UTC) from start to end."""
    first, last = -((EPOCH - start) // step), (end - EPOCH) // step
    return [EPOCH + step * n for n in range(first, last + 1)]


def _time_label(at: datetime, step: timedelta) -> str:
    """A mark's label, as precise as its step; midnight, among hours, is its day."""
    if step < timedelta(seconds=1):
        return f"{at:%H:%M:%S}.{at.microsecond // 100_000}"
    if step < timedelta(minutes=1):
        return f"{at:%H:%M:%S}"
    if step < timedelta(hours=1) or (step < timedelta(days=1) and at.time() != time(0)):
        return f"{at:%H:%M}"
    return f"{at.day} {at:%b}"


def _fit(ticks: list[datetime], labels: list[str], start: datetime, end: datetime) -> bool:
    """Whether the labels, each centred on its mark and kept inside the chart, leave LABEL_GAP between them."""
    edges = [_label_edges(_x(at, start, end), label) for at, label in zip(ticks, labels, strict=True)]
    return all(right + LABEL_GAP <= left for (_, right), (left, _) in itertools.pairwise(edges))


def _label_edges(x: float, label: str) -> tuple[float, float]:
    width = CHARACTER_WIDTH * len(label)
    left = min(max(0.0, x - width / 2), WIDTH - width)
    return left, left + width


def _x(at: datetime, start: datetime, end: datetime) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * min(1.0, max(0.0, (at - start) / (end - start)))


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
    end = max(end, start + SHORTEST)
    x = partial(_x, start=start, end=end)
    top = top or nice_top(max(value for s in series for _, value in s.points))
    inner_h = HEIGHT - TOP - BOTTOM

    def y(value: float) -> float:
        return TOP + inner_h * (1 - min(1.0, max(0.0, value / top)))

    grid = format_html_join(
        "",
        '<line class="grid" x1="{0}" y1="{1}" x2="{2}" y2="{1}"></line><text class="y" x="{3}" y="{4}">{5}</text>',
        ((LEFT, f"{y(v):.1f}", WIDTH - RIGHT, LEFT - 4, f"{y(v) + 4:.1f}", shown(v)) for v in (0, top / 2, top)),
    )
    baseline = HEIGHT - BOTTOM
    times = format_html_join(
        "",
        '<line class="grid" x1="{0}" y1="{1}" x2="{0}" y2="{2}"></line><text class="x {3}" x="{4}" y="{5}">{6}</text>',
        (
            (f"{x(at):.1f}", baseline, baseline + 4, *_label_place(x(at), label), HEIGHT - 6, label)
            for at, label in time_ticks(start, end)
        ),
    )
    drawn = format_html_join("", "{}", ((_drawn(s, x, y, baseline, start, end),) for s in series if s.points))
    return format_html(
        '<svg class="chart line-chart" viewBox="0 0 {} {}" role="img" aria-labelledby="{}-title {}-desc" '
        'data-top="{}" data-start="{}" data-end="{}">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}{}{}</svg>',
        WIDTH, HEIGHT, slug, slug, top, start.isoformat(), end.isoformat(),
        slug, title, slug, description, grid, drawn, times,
    )  # fmt: skip


def _label_place(x: float, label: str) -> tuple[str, str]:
    """A time label's anchor and x: centred on its mark, or held to the chart's side it would cross."""
    left, right = _label_edges(x, label)
    if left == 0.0:
        return "start", "0"
    if right == WIDTH:
        return "end", str(WIDTH)
    return "middle", f"{x:.1f}"


def outline(series: Series, start: datetime, end: datetime) -> list[Point]:
    """The points a series' line goes through: its own, led in from its first span's start and on to its last
    span's end, within [start, end]; a lone instant held on to the end (or from the start, if it is the end)."""
    (first, first_value), (last, last_value) = series.points[0], series.points[-1]
    half = series.span / 2
    points = [(max(start, first - half), first_value), *series.points, (min(end, last + half), last_value)]
    if points[0][0] == points[-1][0]:
        points = [(first if first < end else start, first_value), (end, first_value)]
    return [point for n, point in enumerate(points) if n == 0 or point != points[n - 1]]


def _drawn(series: Series, x, y, baseline: float, start: datetime, end: datetime) -> SafeString:
    """A series as a polyline, and the area under it when it is filled."""
    line = outline(series, start, end)
    points = " ".join(f"{x(at):.1f},{y(value):.1f}" for at, value in line)
    area = ""
    if series.area:
        first, last = x(line[0][0]), x(line[-1][0])
        filled = f"{first:.1f},{baseline:.1f} {points} {last:.1f},{baseline:.1f}"
        area = format_html('<polygon class="{} area" points="{}"></polygon>', series.css, filled)
    return format_html(
        '{}<polyline class="{}" data-series="{}" points="{}"></polyline>', area, series.css, series.name, points
    )
