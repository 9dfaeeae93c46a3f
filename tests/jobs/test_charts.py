"""The charts' figures: the series worked out from shards, holds and readings, and the SVG drawing exactly them,
with no point, one point or many, as lines; the time axis marked at round times for a job of 5 s and one of 5 days."""

import itertools
import random
import re
from datetime import UTC, datetime, timedelta

import pytest

from jobs.pages.charts import held_slots, records_done, records_per_second, spans, used_per_span
from portal.charts import (
    BOTTOM,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    Series,
    _fit,
    averaged,
    latest,
    line_chart,
    nice_top,
    outline,
    time_ticks,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def plotted(svg: str, name: str) -> list[tuple[datetime, float]]:
    """The points the SVG draws for a series, read back into times and values through its axes."""
    top = float(re.search(r'data-top="([^"]+)"', svg)[1])
    start = datetime.fromisoformat(re.search(r'data-start="([^"]+)"', svg)[1])
    end = datetime.fromisoformat(re.search(r'data-end="([^"]+)"', svg)[1])
    found = re.search(rf'<polyline class="[^"]+" data-series="{name}" points="([^"]+)"', svg)
    pairs = [tuple(map(float, pair.split(","))) for pair in found[1].split()]
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    return [(start + (end - start) * ((x - LEFT) / inner_w), top * (1 - (y - TOP) / inner_h)) for x, y in pairs]


def close(drawn, expected, top: float, seconds: float = 0.5) -> bool:
    """The same points, but for the rounding of the SVG's coordinates to a tenth of a pixel."""
    return len(drawn) == len(expected) and all(
        abs((a - b).total_seconds()) <= seconds and abs(u - v) <= top / 1000
        for (a, u), (b, v) in zip(drawn, expected, strict=True)
    )


def test_the_records_done_climb_at_each_shards_end():
    shards = [(at(0), at(30), 300), (at(0), at(20), 200), (at(30), at(50), 100)]
    expected = [(at(0), 0.0), (at(20), 200.0), (at(30), 500.0), (at(50), 600.0)]
    assert records_done(shards, at(0), at(50)) == expected


def test_the_records_done_run_on_to_the_end_without_falling():
    shards = [(at(0), at(30), 300), (at(0), at(20), 200)]
    assert records_done(shards, at(0), at(45))[-2:] == [(at(30), 500.0), (at(45), 500.0)], "a hold past its shards"
    running = records_done(shards, at(0), at(45), running=120)
    assert running[-1] == (at(45), 620.0), "the running shards' records so far, as the job's progress counts them"


def test_the_records_per_second_spread_each_shard_over_the_time_it_took():
    shards = [(at(0), at(20), 200), (at(0), at(40), 800), (at(40), at(60), 100)]
    cuts = spans(at(0), at(60))
    assert len(cuts) == 60, "a span of 1 s"
    pace = dict(records_per_second(shards, cuts))
    assert pace[at(0.5)] == pytest.approx(10 + 20)
    assert pace[at(22.5)] == pytest.approx(20)
    assert pace[at(47.5)] == pytest.approx(5)
    assert sum(pace.values()) == pytest.approx(1100), "every record counted once"


@pytest.mark.parametrize(
    ("seconds", "count", "each"),
    [(1, 1, 1), (5, 5, 1), (300, 120, 2.5), (5 * 3600, 120, 150), (5 * 86400, 120, 3600), (50.123457, 50, 1.0024691)],
)
def test_a_job_is_cut_into_equal_spans_of_a_second_or_more_and_at_most_the_most_points(seconds, count, each):
    cuts = spans(at(0), at(seconds))
    assert len(cuts) == count and cuts[0][0] == at(0) and cuts[-1][1] == at(seconds)
    assert all((end - start).total_seconds() == pytest.approx(each) for start, end in cuts)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(cuts)), "no gap, no partial span"


def test_the_slots_held_count_the_holds_open_in_each_spans_middle():
    holds = [(at(0), at(60)), (at(0), at(30)), (at(40), at(60))]
    held = dict(held_slots(holds, spans(at(0), at(60))))
    assert held[at(2.5)] == 2 and held[at(32.5)] == 1 and held[at(42.5)] == 2


def test_the_slots_used_add_up_each_holds_readings_averaged_in_a_span():
    readings = [(1, at(1), 50), (1, at(3), 70), (2, at(2), 100), (2, at(12), 20)]
    cuts = [(at(0), at(5)), (at(5), at(10)), (at(10), at(15))]
    assert used_per_span(readings, cuts, 0.01) == [(at(2.5), 1.6), (at(12.5), 0.2)]


def test_the_svg_draws_the_figures_of_each_series():
    done = Series("Records done", "accent", [(at(0), 0.0), (at(20), 200.0), (at(30), 500.0), (at(60), 600.0)], True)
    pace = Series("Records per second", "ok", [(at(10), 5.0), (at(40), 12.5)])
    svg = str(line_chart("test", "A title", "A description", [done, pace], at(0), at(60)))
    assert 'role="img" aria-labelledby="test-title test-desc"' in svg
    assert '<title id="test-title">A title</title><desc id="test-desc">A description</desc>' in svg
    assert 'data-top="600.0"' in svg
    assert close(plotted(svg, "Records done"), done.points, 600)
    assert close(plotted(svg, "Records per second"), pace.points, 600)
    assert '<polygon class="accent area"' in svg, "what is held is filled"
    assert ">0</text>" in svg and ">300</text>" in svg and ">600</text>" in svg


def test_one_point_is_a_line_across_its_span_and_no_point_no_chart():
    bucket = Series("Records per second", "ok", [(at(2.5), 40.0)], span=timedelta(seconds=5))
    svg = str(line_chart("one", "One", "One point", [bucket], at(0), at(5)))
    assert "<circle" not in svg
    assert close(plotted(svg, "Records per second"), [(at(0), 40), (at(2.5), 40), (at(5), 40)], 40)
    assert line_chart("none", "None", "No point", [Series("Records done", "accent", [])], at(0), at(60)) == ""


def test_a_lone_instant_is_held_to_the_end_or_from_the_start_when_it_is_the_end():
    assert outline(Series("s", "ok", [(at(20), 3.0)]), at(0), at(60)) == [(at(20), 3.0), (at(60), 3.0)]
    assert outline(Series("s", "ok", [(at(60), 3.0)]), at(0), at(60)) == [(at(0), 3.0), (at(60), 3.0)]
    svg = str(line_chart("x", "X", "One instant", [Series("s", "ok", [(at(5), 1.0)])], at(5), at(5)))
    assert len(plotted(svg, "s")) == 2, "a chart of no time spans a second"


def test_a_line_is_led_in_and_on_to_its_spans_bounds_within_the_chart():
    minutes = Series("Held", "accent", [(at(60), 1.0), (at(120), 2.0)], span=timedelta(minutes=1))
    assert outline(minutes, at(0), at(140)) == [(at(30), 1.0), (at(60), 1.0), (at(120), 2.0), (at(140), 2.0)]
    instants = Series("Records done", "accent", [(at(0), 0.0), (at(30), 10.0)])
    assert outline(instants, at(0), at(60)) == instants.points


T = datetime(2026, 12, 1, 12, 0, 13, 370_000, tzinfo=UTC)  # not on a round time


@pytest.mark.parametrize(
    ("span", "start", "labels"),
    [
        (timedelta(seconds=5), T0, ["12:00:00", "12:00:02", "12:00:04"]),
        (timedelta(seconds=5), T, ["12:00:14", "12:00:16", "12:00:18"]),
        (timedelta(minutes=5), T0, ["12:00", "12:01", "12:02", "12:03", "12:04", "12:05"]),
        (timedelta(minutes=5), T, ["12:01", "12:02", "12:03", "12:04", "12:05"]),
        (timedelta(hours=5), T0, ["12:00", "13:00", "14:00", "15:00", "16:00", "17:00"]),
        (timedelta(hours=5), T0 + timedelta(hours=11, minutes=37), ["2 Dec", "01:00", "02:00", "03:00", "04:00"]),
        (timedelta(days=5), T, ["2 Dec", "3 Dec", "4 Dec", "5 Dec", "6 Dec"]),
        (timedelta(seconds=1), T0, ["12:00:00.0", "12:00:00.5", "12:00:01.0"]),
        (timedelta(hours=24), T, ["18:00", "2 Dec", "06:00", "12:00"]),
        (timedelta(hours=24), T0, ["1 Dec 12:00", "2 Dec 00:00", "2 Dec 12:00"]),
    ],
)
def test_the_time_axis_is_marked_at_round_times_by_its_span(span, start, labels):
    ticks = time_ticks(start, start + span)
    assert [label for _, label in ticks] == labels
    assert all(start <= tick <= start + span for tick, _ in ticks)


@pytest.mark.parametrize("seconds", [0.4, 1, 3, 5, 7, 37, 90, 300, 1000, 5 * 3600, 30 * 3600, 86400 * 5, 86400 * 40])
def test_the_time_axis_has_at_least_two_marks_each_label_once_and_apart(seconds):
    for start in (T0, T, T0 + timedelta(hours=23, minutes=59, seconds=58)):
        labels = [label for _, label in time_ticks(start, start + timedelta(seconds=seconds))]
        assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
        assert len(labels) * (max(map(len, labels)) * 10.8 + 8) <= WIDTH, "they fit side by side at a phone's size"


def test_every_span_from_any_start_has_two_marks_or_more_that_fit():
    """Not only the spans above: 7.5 s from 04:39:40.71 gave one mark, its round times 2 s apart too near the
    left edge to fit and 5 s apart only one (a journey's chart showed a single label); 2 % of random spans did."""
    draw = random.Random(41)
    for _ in range(20_000):
        start = T0 + timedelta(seconds=draw.uniform(0, 86400))
        span = timedelta(seconds=10 ** draw.uniform(0, 6.5))
        ticks = time_ticks(start, start + span)
        labels = [label for _, label in ticks]
        assert len(labels) >= 2 and len(set(labels)) == len(labels), (start, span, labels)
        assert all(start <= at <= start + span for at, _ in ticks), (start, span, ticks)
        assert _fit([at for at, _ in ticks], labels, start, start + span), (start, span, labels)


def test_the_svg_labels_its_time_axis_with_the_marks():
    svg = str(line_chart("t", "T", "A 5 s job", [Series("s", "ok", [(at(0), 1.0), (at(5), 2.0)])], at(0), at(5)))
    labels = re.findall(r'<text class="x [a-z]+" x="[^"]+" y="[^"]+">([^<]+)</text>', svg)
    assert labels == ["12:00:00", "12:00:02", "12:00:04"]


def test_the_titles_are_escaped():
    svg = str(line_chart("x", "<b>node</b>", "a & b", [Series("s", "ok", [(at(0), 1.0)])], at(0), at(1)))
    assert "&lt;b&gt;node&lt;/b&gt;" in svg and "a &amp; b" in svg


def test_a_long_series_is_averaged_into_at_most_the_most_points():
    minutes = [(at(60 * n), float(n % 2)) for n in range(1440)]
    points = averaged(minutes, at(0), at(86400))
    assert len(points) == 120 and all(value == pytest.approx(0.5) for _, value in points)


@pytest.mark.parametrize(
    ("largest", "top"), [(0, 2), (1, 2), (3, 4), (9.5, 10), (11, 12), (60_000, 60_000), (163_118, 200_000)]
)
def test_the_axis_tops_are_round(largest, top):
    assert nice_top(largest) == top


def test_shards_that_end_together_are_one_point():
    shards = [(at(0), at(30), 300), (at(0), at(30), 200)]
    assert records_done(shards, at(0), at(30)) == [(at(0), 0.0), (at(30), 500.0)]


def test_a_long_running_total_keeps_the_last_point_of_each_span():
    shards = [(at(n), at(n + 1), 10) for n in range(3600)]
    points = latest(records_done(shards, at(0), at(3601)), at(0), at(3601))
    assert len(points) == 121 and points[0] == (at(0), 0.0) and points[-1] == (at(3601), 36_000.0)
    assert all(a[1] < b[1] for a, b in itertools.pairwise(points)), "it climbs"
