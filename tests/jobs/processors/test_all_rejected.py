"""A batch, or a whole shard, in which no record is kept: every record still lands in exactly one of
the output or the rejects, the job succeeds and its manifest counts them, whatever the work kind.

End to end on a real worker, with the mixes partners met (a run of ragged CSV records longer than a
batch, declared types no value fits, JSONL with many broken lines, a shard whose only image is
unreadable), and batch by batch across every registered work kind, with an all-bad and an empty batch.
"""

import csv
import io
import json
import zipfile

import pyarrow.parquet as pq
import pytest

from jobs import processors
from jobs.models import Job, State
from jobs.processors import Context, Record
from jobs.processors.clean_table import CleanTable, TypeScanner
from jobs.processors.column_stats import ColumnStats, StatsScanner
from jobs.processors.embed_text import EmbedText
from tests.datasets import picture, zipped
from tests.support import OutputZip, job_form, needs_libraries_of, wait_for_end

BROKEN_IMAGE = b"\x89PNG\r\n\x1a\nthis is not the rest of a png"


def finished(client, form: dict) -> tuple[Job, dict, list[dict], list[dict]]:
    """Run the job the form describes; its manifest, output rows and rejects, once it succeeded."""
    response = client.post("/jobs/new/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    whole = OutputZip(client, job)
    manifest = json.loads(whole.read("manifest.json"))
    rows = pq.read_table(io.BytesIO(whole.read("output.parquet"))).to_pylist()
    rejects = list(csv.DictReader(io.StringIO(whole.read("rejects.csv").decode())))
    return job, manifest, rows, rejects


def assert_each_record_once(job: Job, manifest: dict, rows: list[dict], rejects: list[dict], out: int) -> None:
    positions = [row["_record"] for row in rows] + [int(row["record"]) for row in rejects]
    assert sorted(positions) == list(range(1, job.records_total + 1)), "every record exactly once"
    assert len(rows) == out
    counts = manifest["records"]
    assert (counts["in"], counts["out"], counts["rejected"], counts["not_processed"]) == (
        job.records_total,
        out,
        job.records_total - out,
        0,
    )
    assert (job.records_out, job.records_rejected) == (out, job.records_total - out)


def table(rows: list[str], header: str = "id,name,amount") -> bytes:
    return (header + "\n" + "".join(row + "\n" for row in rows)).encode()


def good(first: int, count: int) -> list[str]:
    return [f"{n},name {n},{n}.5" for n in range(first, first + count)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("gpus", ["1", "2"])
def test_it_keeps_a_run_of_ragged_records_longer_than_a_batch_as_rejects(fleet, partner_client, gpus):
    ragged = [f"{n},only two" for n in range(301, 301 + 2 * CleanTable.batch_size)]
    data = table(good(1, 300) + ragged + good(301 + len(ragged), 300))
    job, manifest, rows, rejects = finished(partner_client, job_form(data, name="ragged.csv", gpus=gpus))
    assert_each_record_once(job, manifest, rows, rejects, out=600)
    assert {row["reason"] for row in rejects} == {"expected 3 fields, found 2"}
    assert [(row["record"], row["line"], row["raw"]) for row in rejects[:1]] == [("301", "302", "301,only two")]
    assert any(shard["out"] == 0 for shard in manifest["shards"]), "a shard kept nothing"


@pytest.mark.django_db(transaction=True)
def test_it_rejects_every_record_when_no_value_fits_a_declared_type(fleet, partner_client):
    data = table([f"{n},name {n},lots" for n in range(1, 1201)])
    form = job_form(data, name="words.csv", **{"param-clean-table-types": "amount:int"})
    job, manifest, rows, rejects = finished(partner_client, form)
    assert_each_record_once(job, manifest, rows, rejects, out=0)
    assert {row["reason"] for row in rejects} == {"column 'amount': 'lots' is not an int"}
    assert job.shards.count() > 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("work", ["clean-table", "column-stats"])
def test_it_rejects_many_broken_jsonl_lines_in_a_row(fleet, partner_client, work):
    lines = [json.dumps({"id": n, "name": f"name {n}"}) for n in range(1, 301)]
    lines += ['{"id": broken' for _ in range(3000)]
    lines += [json.dumps({"id": n, "name": f"name {n}"}) for n in range(3301, 3601)]
    data = ("\n".join(lines) + "\n").encode()
    job, manifest, rows, rejects = finished(partner_client, job_form(data, name="broken.jsonl", work=work))
    assert len(rejects) == 3000
    assert all(row["reason"].startswith("not valid JSON") for row in rejects)
    if work == "clean-table":
        assert_each_record_once(job, manifest, rows, rejects, out=600)
    else:
        assert {row["column"]: row["count"] for row in rows} == {"id": 600, "name": 600}
        assert (manifest["records"]["out"], manifest["records"]["rejected"]) == (600, 3000)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "images",
    [
        {"photos/a.png": picture(), "photos/broken.png": BROKEN_IMAGE, "photos/c.png": picture()},
        {"photos/broken.png": BROKEN_IMAGE},
    ],
    ids=["one-shard-of-three", "the-only-image"],
)
def test_it_rejects_a_shard_whose_only_image_is_unreadable(fleet, partner_client, images):
    form = job_form(zipped(images), name="photos.zip", work="image-thumbs", gpus="2")
    job, manifest, rows, rejects = finished(partner_client, form)
    broken = list(images).index("photos/broken.png") + 1
    assert job.shards.count() == len(images), "one image per shard"
    assert_each_record_once(job, manifest, rows, rejects, out=len(images) - 1)
    assert [row["_record"] for row in rows] == [n for n in range(1, len(images) + 1) if n != broken]
    assert [(row["record"], row["raw"], row["reason"].split(":")[1].strip()[:20]) for row in rejects] == [
        (str(broken), "photos/broken.png", "not a readable image")
    ]
    bundle = b"".join(partner_client.get(f"/jobs/{job.pk}/output/thumbnails.zip").streaming_content)
    assert len(zipfile.ZipFile(io.BytesIO(bundle)).namelist()) == len(images) - 1


@needs_libraries_of(EmbedText())
@pytest.mark.django_db(transaction=True)
def test_it_rejects_every_text_when_none_can_be_embedded(fleet, partner_client):
    data = table([f"{n}, " for n in range(1, 801)], header="id,text")
    form = job_form(data, name="blank.csv", work="embed-text", gpus="1")
    job, manifest, rows, rejects = finished(partner_client, form)
    assert_each_record_once(job, manifest, rows, rejects, out=0)
    assert {row["reason"] for row in rejects} == {"column 'text' is empty"}


# Batch by batch, every registered work kind


def unreadable(positions: range) -> list[Record]:
    return [Record(n, n + 1, None, "not valid JSON: Expecting value", 0, 0, n + 1) for n in positions]


def readable(values: list, first: int) -> list[Record]:
    return [Record(n, n + 1, value, None, 0, 0, n + 1) for n, value in enumerate(values, start=first)]


def csv_layout(columns: list[str]) -> dict:
    return {"format": "csv", "delimiter": ",", "quotechar": '"', "columns": columns}


def planned(scanner, values: list, columns: list[str]) -> dict:
    for value in values:
        scanner.add(value)
    return scanner.plan(columns)


def clean_table_case() -> tuple[Context, list]:
    params = CleanTable().validate_params({"types": "amount:int"})
    context = Context(params=params, plan=planned(TypeScanner(params), [], ["amount"]), layout=csv_layout(["amount"]))
    return context, [["lots"], ["1.5"], ["x"]]


def column_stats_case() -> tuple[Context, list]:
    params = ColumnStats().validate_params({})
    plan = planned(StatsScanner(params), [["1"], ["2"]], ["n"])
    return Context(params=params, plan=plan, layout=csv_layout(["n"])), []


def embed_text_case() -> tuple[Context, list]:
    params = processors.get("embed-text").validate_params({})
    plan = processors.get("embed-text").prepare({}, csv_layout(["text"]), params, "")
    return Context(params=params, plan=plan, layout=csv_layout(["text"])), [[""], ["   "], [None]]


def image_thumbs_case() -> tuple[Context, list]:
    params = processors.get("image-thumbs").validate_params({})
    layout = {"format": "images", "archive": "zip", "columns": ["name", "data"]}
    return Context(params=params, plan={}, layout=layout), [{"name": "broken.png", "data": BROKEN_IMAGE}]


def onnx_infer_case() -> tuple[Context, list]:
    spec = {"name": "x", "type": "tensor(float)", "rank": 1, "width": 1, "columns": ["x"], "dtype": "float32"}
    plan = {"inputs": [spec], "outputs": [{"name": "y", "type": "tensor(float)", "rank": 1, "width": 1}]}
    params = processors.get("onnx-infer").validate_params({})
    return Context(params=params, plan=plan, layout=csv_layout(["x"]), model="no-model-is-loaded.onnx"), [["a"], [""]]


def partner_model_case(name: str, raw: dict, plan: dict, bad: list) -> tuple[Context, list]:
    """A kind that runs the partner's model, with the plan staging makes; no record reaches the model."""
    params = processors.get(name).validate_params(raw)
    return Context(params=params, plan=plan, layout=csv_layout(["text"]), model="no-model-is-loaded.zip"), bad


def embed_case() -> tuple[Context, list]:
    plan = {"column": "text", "index": 0, "pooling": "mean", "normalise": True, "dimension": 8}
    return partner_model_case("embed", {"dtype": "float16"}, plan, [[""], [None]])


def classify_case() -> tuple[Context, list]:
    plan = {"column": "text", "index": 0, "labels": ["a", "b"]}
    return partner_model_case("classify", {"all_scores": "yes"}, plan, [[""], [None]])


def generate_case() -> tuple[Context, list]:
    return partner_model_case("generate", {}, {"fields": {"text": ["text", 0]}}, [[], [None]])  # a short row


def plugin_case() -> tuple[Context, list]:
    params = processors.get("test-slow-echo").validate_params({"seconds_per_batch": "0"})
    return Context(params=params, plan={}, layout=csv_layout(["a"])), []


# Values each kind rejects (none for those that reject only unreadable records).
CASES = {
    "classify": classify_case,
    "clean-table": clean_table_case,
    "column-stats": column_stats_case,
    "embed": embed_case,
    "embed-text": embed_text_case,
    "generate": generate_case,
    "image-thumbs": image_thumbs_case,
    "onnx-infer": onnx_infer_case,
    "test-slow-echo": plugin_case,
}


def test_every_registered_work_kind_has_a_case_here():
    assert sorted(CASES) == sorted(processor.name for processor in processors.available())


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("batch", ["empty", "unreadable", "rejected", "mixed"])
def test_it_runs_a_batch_that_keeps_nothing_for_every_work_kind(name, batch):
    processor = processors.get(name)
    context, bad_values = CASES[name]()
    after = 3 + len(bad_values)
    records = {
        "empty": [],
        "unreadable": unreadable(range(1, 4)),
        "rejected": readable(bad_values, 1),
        "mixed": unreadable(range(1, 3)) + readable(bad_values, 3) + unreadable(range(after, after + 2)),
    }[batch]
    result = processor.run_batch(records, context)
    assert result.kept == []
    assert sorted(record.position for record, _ in result.rejects) == [record.position for record in records]
    assert result.table.schema == processor.output_schema(context), "the part's schema, not one inferred from nothing"
    if not processor.reduces:
        assert result.table.num_rows == 0


def test_it_refuses_a_batch_that_loses_a_record():
    processor = processors.get("test-slow-echo")
    context, _ = plugin_case()

    class Forgetful(type(processor)):
        def process_batch(self, records, context):
            found = super().process_batch(records, context)
            found.kept.pop()
            return found

    with pytest.raises(RuntimeError, match="test-slow-echo lost records"):
        Forgetful().run_batch(readable([["a"], ["b"]], 1), context)
