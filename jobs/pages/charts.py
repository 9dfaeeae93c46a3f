"""The charts of a job's page and of the operators' console, as series of figures and as SVG (portal.charts).

A job: its records done and records per second over its hold, from its shards' starts and ends (and the
records the shards still running say they have done); and the slots it held against what they used
(utilisation, memory), from its holds' readings (jobs.history). The fleet: each node's slots online, held and
used, and the queue's length, over the last day, or since the first sample when that is later.

Each chart comes with the rows of its table: the same figures it draws, for a screen reader and for
anyone who wants the numbers."""

import itertools
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property

from django.db.models import Q, QuerySet, Sum
from django.utils import timezone
from django.utils.safestring import SafeString

from jobs.facts import JobFacts
from jobs.models import Job, Node, NodeSample, QueueSample, Shard, SlotReading, State
from portal.charts import MOST_POINTS, Point, Series, averaged, latest, line_chart, nice_top

SPAN_SECONDS = 1  # a job's figures are worked out per span of at least this long, at most MOST_POINTS spans
FLEET_DAY = timedelta(hours=24)
FLEET_SHORTEST = timedelta(minutes=5)  # the fleet's charts span at least this long, from their first sample
SAMPLED_EVERY = timedelta(minutes=1)  # beat's sample_fleet


Shards = list[tuple[datetime, datetime, int]]  # each finished shard's start, end and records
Running = list[tuple[datetime, int]]  # each running shard's start and the records its batches have done so far
Spans = list[tuple[datetime, datetime]]  # from, to


@dataclass(frozen=True)
class Chart:
    heading: str
    svg: SafeString
    series: list[Series]
    columns: list[str]  # the table's: a time, then one per series
    note: str = ""

    @property
    def rows(self) -> list[tuple[datetime, list[float | None]]]:
        """The table: each time any series has a point, and each series' value then (None: no point)."""
        by_series = [dict(s.points) for s in self.series]
        times = sorted({at for s in self.series for at, _ in s.points})
        return [(at, [values.get(at) for values in by_series]) for at in times]


@dataclass
class JobCharts:
    start: datetime
    end: datetime
    charts: list[Chart] = field(default_factory=list)
    empty: str = ""  # why there is no chart yet


def spans(start: datetime, end: datetime) -> Spans:
    """[start, end] cut into equal spans of at least SPAN_SECONDS, at most MOST_POINTS of them; the last ends at
    `end` itself, not a rounded microsecond past it."""
    seconds = (end - start).total_seconds()
    count = max(1, min(MOST_POINTS, int(seconds // SPAN_SECONDS)))
    bounds = [start + (end - start) * n / count for n in range(count + 1)]
    return list(itertools.pairwise(bounds))


def middle(span: tuple[datetime, datetime]) -> datetime:
    return span[0] + (span[1] - span[0]) / 2


def records_done(shards: Shards, start: datetime, end: datetime, running: int = 0) -> list[Point]:
    """The records done so far at each moment shards ended (those that ended together in one point), from
    none at the start; and at the end, all of them with the `running` shards' records so far, so that the
    running total runs on to the end, as the job's progress counts it."""
    points, done = [(start, 0.0)], 0
    for _, finished, count in sorted(shards, key=lambda shard: shard[1]):
        done += count
        if points[-1][0] == finished:
            points.pop()
        points.append((finished, float(done)))
    if points[-1][0] == end:
        points.pop()
    return [*points, (end, float(done + running))]


def records_per_second(shards: Shards, cuts: Spans) -> list[Point]:
    """The records per second over each span, all slots together: each shard's records counted as done at an
    even pace from its start to its end."""
    bounds = [cuts[0][0], *(span_end for _, span_end in cuts)]
    done = _done_by(shards, bounds)
    return [
        (middle(span), max(0.0, (done[n + 1] - done[n]) / (span[1] - span[0]).total_seconds()))
        for n, span in enumerate(cuts)
    ]


def _done_by(shards: Shards, times: list[datetime]) -> list[float]:
    """The records done by each of these times (in order), each shard's at an even pace: one sweep over the
    moments the pace changes, a shard's start and end."""
    changes: list[tuple[datetime, float]] = []  # when the pace changes, and by how much (records a second)
    for started, finished, count in shards:
        pace = count / max((finished - started).total_seconds(), 0.001)
        changes += [(started, pace), (finished, -pace)]
    changes.sort(key=lambda change: change[0])
    found, done, pace, at, index = [], 0.0, 0.0, times[0], 0
    for time in times:
        while index < len(changes) and changes[index][0] <= time:
            when, change = changes[index]
            done += pace * max(0.0, (when - at).total_seconds())
            at, pace, index = max(at, when), pace + change, index + 1
        done += pace * max(0.0, (time - at).total_seconds())
        at = max(at, time)
        found.append(done)
    return found


def held_slots(holds: Spans, cuts: Spans) -> list[Point]:
    """How many slots the job held at each span's middle."""
    starts, ends = sorted(start for start, _ in holds), sorted(end for _, end in holds)
    return [(at, float(bisect_right(starts, at) - bisect_right(ends, at))) for at in map(middle, cuts)]


def used_per_span(readings: list[tuple[int, datetime, float]], cuts: Spans, scale: float = 1.0) -> list[Point]:
    """Per span with readings: each hold's readings in it averaged, added up over the holds, times `scale`."""
    bounds = [span_start for span_start, _ in cuts[1:]]
    per_span: dict[int, dict[int, list[float]]] = {}
    for hold, at, value in readings:
        per_span.setdefault(bisect_right(bounds, at), {}).setdefault(hold, []).append(value)
    return [
        (middle(cuts[n]), scale * sum(sum(values) / len(values) for values in holds.values()))
        for n, holds in sorted(per_span.items())
    ]


def job_charts(job: Job, now: datetime | None = None) -> JobCharts | None:
    """The job's charts over its hold: none before it held anything. Three reads: its finished shards,
    its holds, their readings."""
    now = now or timezone.now()
    holds = list(job.allocations.values_list("pk", "held_from", "held_to", "gpu__memory_mb", "gpu__kind"))
    if not holds:
        return None
    done = Q(status__in=(Shard.Status.DONE, Shard.Status.FAILED), finished_at__isnull=False)
    rows = job.shards.filter(done | Q(status=Shard.Status.RUNNING), started_at__isnull=False).values_list(
        "status", "started_at", "finished_at", "record_count", "records_done"
    )
    shards: Shards = []
    running: Running = []
    for status, started, finished, count, so_far in rows:
        if status != Shard.Status.RUNNING:
            shards.append((started, finished, count))
        elif job.state == State.RUNNING:  # a shard left running by a job that ended did no more
            running.append((started, so_far))
    start = min([held_from for _, held_from, _, _, _ in holds] + [started for started, _, _ in shards])
    end = max([held_to or now for _, _, held_to, _, _ in holds] + [finished for _, finished, _ in shards])
    end = max(end, start + timedelta(seconds=1))  # a hold that has just started spans a second
    cuts = spans(start, end)
    found = JobCharts(start, end)
    noun = "CPU slot" if all(kind == "cpu" for *_, kind in holds) else "GPU"
    if shards:
        found.charts += _records_charts(shards, running, start, end, cuts)
    else:
        found.empty = "No shard has finished yet: the charts start with the first."
    readings = list(
        SlotReading.objects.filter(allocation__job=job)
        .order_by("at")
        .values_list("allocation_id", "at", "utilisation", "memory_used_mb")
    )
    found.charts += _usage_charts(holds, readings, start, end, cuts, noun, now)
    return found


def _records_charts(shards: Shards, running: Running, start, end, cuts: Spans) -> list[Chart]:
    """Records done, and records per second up to the oldest running shard's start: past it, the records of the
    shards still running are not all known, and the pace would fall at the right edge while they run."""
    so_far = records_done(shards, start, end, sum(records for _, records in running))
    done = Series("Records done", "accent", latest(so_far, start, end), area=True)
    known_until = min((started for started, _ in running), default=end)
    known = [span for span in cuts if span[1] <= known_until]
    pace = Series("Records per second", "ok", records_per_second(shards, known) if known else [], span=_step(cuts))
    note = ""
    if len(known) < len(cuts):
        note = f"Drawn to {known_until:%H:%M:%S} UTC, when the oldest shard still running began: the rest when it ends."
    return [
        _chart("records-done", "Records done", "Records done so far, at each shard's end", [done], start, end),
        _chart(
            "records-per-second",
            "Records per second",
            "Records per second, all slots together, each shard's records spread over the time it took",
            [pace],
            start,
            end,
            note=note,
        ),
    ]


def _step(cuts: Spans) -> timedelta:
    return cuts[0][1] - cuts[0][0]


def _usage_charts(holds, readings, start, end, cuts, noun, now) -> list[Chart]:
    periods = [(held_from, held_to or now) for _, held_from, held_to, _, _ in holds]
    step = _step(cuts)
    held = Series(f"{noun}s held", "accent", held_slots(periods, cuts), area=True, span=step)
    used = Series(f"{noun}s used", "ok", used_per_span([(h, at, u) for h, at, u, _ in readings], cuts, 0.01), span=step)
    title = f"{noun}s held and used"
    description = f"{noun}s the job held, and their utilisation added up in {noun}s (100% busy counts one)"
    note = "" if readings else f"No {noun} reported its utilisation{' (CPU slots have none)' if noun != 'GPU' else ''}."
    charts = [_chart("held-used", title, description, [held, used], start, end, note=note)]
    memory = {pk: mb for pk, _, _, mb, _ in holds}
    if readings and all(memory.values()):
        memory_held = [
            (at, float(sum(memory[pk] for pk, held_from, held_to, _, _ in holds if held_from <= at < (held_to or now))))
            for at in map(middle, cuts)
        ]
        in_use = used_per_span([(h, at, float(mb)) for h, at, _, mb in readings], cuts)
        charts.append(
            _chart(
                "memory",
                "Memory held and in use (MB)",
                f"The memory of the {noun}s held, and how much of it was in use, in MB",
                [
                    Series("Memory held", "accent", memory_held, area=True, span=step),
                    Series("Memory in use", "ok", in_use, span=step),
                ],
                start,
                end,
            )
        )
    return charts


def _chart(slug, heading, description, series, start, end, top=None, note="") -> Chart:
    svg = line_chart(slug, heading, description, series, start, end, top=top, shown=_short)
    return Chart(heading, svg, series, ["Time (UTC)", *(s.name for s in series)], note)


def _short(value: float) -> str:
    """A value axis's figure in few characters: 2.5, 250, 12k, 1.5M."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


@dataclass
class FleetCharts:
    start: datetime
    end: datetime
    fleet: Chart | None
    nodes: list[Chart]
    queue: Chart | None


def sampled_nodes(now: datetime | None = None) -> QuerySet:
    """The nodes sampled in the last day, by name: the fleet page shows a page of them."""
    start = (now or timezone.now()) - FLEET_DAY
    return Node.objects.filter(pk__in=NodeSample.objects.filter(at__gte=start).values("node_id")).order_by("name")


def fleet_charts(nodes: Sequence[Node], now: datetime | None = None) -> FleetCharts:
    """The last day of the fleet, or the time since its first sample when that is shorter (at least
    FLEET_SHORTEST), spread over the charts' width: the whole fleet's slots online, held and used, added up a
    minute at a time by the database; the same of each of `nodes` (a page of them); and the queue's length.
    Three reads, none longer than a day of minutes per node asked for, so the page costs the same however many
    nodes there are."""
    now = now or timezone.now()
    recent = NodeSample.objects.filter(at__gte=now - FLEET_DAY)
    whole = recent.order_by("at").values("at").annotate(s=Sum("slots"), h=Sum("held"), u=Sum("used"))
    fleet = [(row["at"], row["s"], row["h"], row["u"]) for row in whole]
    samples: dict[str, list[tuple[datetime, int, int, float | None]]] = {node.name: [] for node in nodes}
    rows = recent.filter(node__in=nodes).order_by("node__name", "at")
    for name, at, slots, held, used in rows.values_list("node__name", "at", "slots", "held", "used"):
        samples[name].append((at, slots, held, used))
    queue = list(
        QueueSample.objects.filter(at__gte=now - FLEET_DAY)
        .order_by("at")
        .values_list("at", "queued", "on_hold", "running")
    )
    start = min([found[0][0] for found in (fleet, queue) if found] + [now - FLEET_SHORTEST])
    charts = [_node_chart(f"node-{n}", name, found, start, now) for n, (name, found) in enumerate(samples.items())]
    chart = None
    if queue:
        series = [
            _averaged("Queued", "accent", [(at, float(q)) for at, q, _, _ in queue], start, now, area=True),
            _averaged("On hold", "warn", [(at, float(h)) for at, _, h, _ in queue], start, now),
            _averaged("Running", "ok", [(at, float(r)) for at, _, _, r in queue], start, now),
        ]
        description = "Jobs queued (those on hold among them) and running, sampled once a minute"
        chart = _chart("queue", "The queue", description, series, start, now)
    whole_fleet = _node_chart("fleet", "The whole fleet", fleet, start, now) if fleet else None
    return FleetCharts(start, now, whole_fleet, [chart for chart in charts if chart], chart)


def _averaged(name: str, css: str, points: list[Point], start: datetime, end: datetime, area: bool = False) -> Series:
    """A series of the minutes sampled, averaged into at most MOST_POINTS spans: each point stands for its span,
    or for its minute when the points are as sampled."""
    span = max(SAMPLED_EVERY, (end - start) / MOST_POINTS)
    return Series(name, css, averaged(points, start, end), area=area, span=span)


def _node_chart(key: str, name: str, samples, start: datetime, end: datetime) -> Chart | None:
    """Slots held and used, and the slots online drawn over them, under a top above the most slots online: their
    line is not the chart's edge."""
    if not samples:
        return None
    series = [
        _averaged("Held", "accent", [(at, float(held)) for at, _, held, _ in samples], start, end, area=True),
        _averaged("Used", "ok", [(at, used) for at, _, _, used in samples if used is not None], start, end),
        _averaged("Slots online", "muted", [(at, float(slots)) for at, slots, _, _ in samples], start, end),
    ]
    top = nice_top(1.25 * max(slots for _, slots, _, _ in samples))
    note = "" if series[1].points else "Its slots report no utilisation (CPU slots): only what is held is drawn."
    description = f"{name}: its slots online, those held by jobs, and their utilisation added up in slots"
    return _chart(key, name, description, series, start, end, top=top, note=note)


class PageFacts(JobFacts):
    """A job's facts as its page reads them: with its charts too."""

    @cached_property
    def charts(self) -> JobCharts | None:
        """Its records and its slots' use over its hold, drawn with the panels, not with the polled status card."""
        return job_charts(self.job)
