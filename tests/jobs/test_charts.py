"""The charts' figures: the series worked out from shards, holds and readings, and the SVG drawing exactly them,
with no point, one point or many."""

import itertools
import re
from datetime import UTC, datetime, timedelta

import pytest

from jobs.pages.charts import held_slots, records_done, records_per_second, spans, used_per_span
from portal.charts import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, Series, averaged, latest, line_chart, nice_top

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def plotted(svg: str, name: str) -> list[tuple[datetime, float]]:
    """The points the SVG draws for a series, read back into times and values through its axes."""
    top = float(re.search(r'data-top="([^"]+)"', svg)[1])
    start = datetime.fromisoformat(re.search(r'data-start="([^"]+)"', svg)[1])
    end = datetime.fromisoformat(re.search(r'data-end="([^"]+)"', svg)[1])
    if found := re.search(rf'<polyline class="[^"]+" data-series="{name}" points="([^"]+)"', svg):
        pairs = [tuple(map(float, pair.split(","))) for pair in found[1].split()]
    else:
        circle = re.search(rf'data-series="{name}" cx="([^"]+)" cy="([^"]+)"', svg)
        pairs = [(float(circle[1]), float(circle[2]))]
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
    assert records_done(shards, at(0)) == [(at(0), 0.0), (at(20), 200.0), (at(30), 500.0), (at(50), 600.0)]


def test_the_records_per_second_spread_each_shard_over_the_time_it_took():
    shards = [(at(0), at(20), 200), (at(0), at(40), 800), (at(40), at(60), 100)]
    cuts = spans(at(0), at(60))
    assert len(cuts) == 12, "a span of 5 s"
    pace = dict(records_per_second(shards, cuts))
    assert pace[at(2.5)] == pytest.approx(10 + 20)
    assert pace[at(22.5)] == pytest.approx(20)
    assert pace[at(47.5)] == pytest.approx(5)
    assert sum(value * 5 for value in pace.values()) == pytest.approx(1100), "every record counted once"


def test_a_span_holds_at_most_the_most_points():
    assert len(spans(at(0), at(4 * 3600))) == 120
    assert len(spans(at(0), at(1))) == 1, "a job of a second is one span"


def test_the_slots_held_count_the_holds_open_in_each_spans_middle():
    holds = [(at(0), at(60)), (at(0), at(30)), (at(40), at(60))]
    held = dict(held_slots(holds, spans(at(0), at(60))))
    assert held[at(2.5)] == 2 and held[at(32.5)] == 1 and held[at(42.5)] == 2


def test_the_slots_used_add_up_each_holds_readings_averaged_in_a_span():
    readings = [(1, at(1), 50), (1, at(3), 70), (2, at(2), 100), (2, at(12), 20)]
    assert used_per_span(readings, spans(at(0), at(15)), 0.01) == [(at(2.5), 1.6), (at(12.5), 0.2)]


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


def test_one_point_is_a_dot_and_no_point_no_chart():
    one = Series("Records done", "accent", [(at(5), 40.0)])
    svg = str(line_chart("one", "One", "One point", [one], at(5), at(5)))
    assert "<circle" in svg and "<polyline" not in svg
    assert close(plotted(svg, "Records done"), one.points, 40)
    assert line_chart("none", "None", "No point", [Series("Records done", "accent", [])], at(0), at(60)) == ""


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
    assert records_done(shards, at(0)) == [(at(0), 0.0), (at(30), 500.0)]


def test_a_long_running_total_keeps_the_last_point_of_each_span():
    shards = [(at(n), at(n + 1), 10) for n in range(3600)]
    points = latest(records_done(shards, at(0)), at(0), at(3601))
    assert len(points) == 121 and points[0] == (at(0), 0.0) and points[-1] == (at(3600), 36_000.0)
    assert all(a[1] < b[1] for a, b in itertools.pairwise(points)), "it climbs"
