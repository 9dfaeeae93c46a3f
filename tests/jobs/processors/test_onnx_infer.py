"""onnx-infer: the partner's ONNX model (built here with onnx's helper) run over a table by real
worker processes, its outputs compared with the same arithmetic in numpy; a model that does not
load or does not fit the data is refused before any GPU is held."""

import csv
import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from onnx import TensorProto, helper

from jobs import processors, services
from jobs.models import Allocation, Job, State
from jobs.processors.onnx_infer import OnnxInfer, describe, parse_inputs
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from tests.datasets import BIAS, WEIGHTS, linear_model, model_bytes, table_csv
from tests.support import OutputZip, job_form, wait_for, wait_for_end


def sum_model() -> bytes:
    """age [N] (double) and visits [N, 1] (int64) → total = age + visits [N] (double)."""
    nodes = [
        helper.make_node("Reshape", ["visits", "flat"], ["visits_flat"]),
        helper.make_node("Cast", ["visits_flat"], ["visits_double"], to=TensorProto.DOUBLE),
        helper.make_node("Add", ["age", "visits_double"], ["total"]),
    ]
    graph = helper.make_graph(
        nodes,
        "sum",
        [
            helper.make_tensor_value_info("age", TensorProto.DOUBLE, ["N"]),
            helper.make_tensor_value_info("visits", TensorProto.INT64, ["N", 1]),
        ],
        [helper.make_tensor_value_info("total", TensorProto.DOUBLE, ["N"])],
        initializer=[helper.make_tensor("flat", TensorProto.INT64, [1], [-1])],
    )
    return model_bytes(graph)


def onnx_form(data: bytes, model: bytes, inputs: str = "features=a+b+c", **fields) -> dict:
    return job_form(
        data,
        name="table.csv",
        work="onnx-infer",
        model=SimpleUploadedFile("scorer.onnx", model, content_type="application/octet-stream"),
        **{"param-onnx-infer-inputs": inputs},
        **fields,
    )


def output_of(client, job: Job) -> tuple[list[dict], list[dict], dict]:
    archive = OutputZip(client, job)
    rows = pq.read_table(io.BytesIO(archive.read("output.parquet"))).to_pylist()
    rejects = list(csv.DictReader(io.StringIO(archive.read("rejects.csv").decode())))
    return rows, rejects, json.loads(archive.read("manifest.json"))


def write(tmp_path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


def test_it_describes_a_model_and_refuses_what_it_cannot_read(tmp_path):
    found = describe(write(tmp_path, "linear.onnx", linear_model()))
    assert found["inputs"] == [{"name": "features", "type": "tensor(float)", "rank": 2, "width": 3}]
    assert [(o["name"], o["width"]) for o in found["outputs"]] == [("score", 2), ("label", 1)]
    cases = [
        (b"this is not a model", "the model does not load"),
        (b"", "the model does not load"),
        (linear_model(out_type=TensorProto.FLOAT16), r"'score' is tensor\(float16\): only tensors of float"),
        (linear_model(batch=4), "takes batches of exactly 4: export it with a dynamic batch dimension"),
    ]
    for content, message in cases:
        with pytest.raises(processors.ParamError, match=message):
            describe(write(tmp_path, "bad.onnx", content))


@pytest.mark.parametrize("text", ["features", "features=", "=a", "features=a++b", "a=b,c"])
def test_it_names_a_bad_inputs_entry(text):
    with pytest.raises(processors.ParamError, match=r"inputs entry .* must be input=column"):
        parse_inputs(text)


def test_the_inputs_parameter_maps_inputs_to_columns():
    assert parse_inputs(" features = a+b + c , age=years") == {"features": ["a", "b", "c"], "age": ["years"]}
    assert parse_inputs("") == {}


def test_it_maps_an_input_to_a_column_however_its_name_is_composed():
    model = default_storage.save("models/linear.onnx", ContentFile(linear_model()))
    processor, columns = OnnxInfer(), ["id", "cafe\u0301", "b", "c"]
    params = processor.validate_params({"inputs": "features=caf\u00e9+b+c"})
    plan = processor.prepare({}, {"columns": columns}, params, model)
    assert plan["inputs"][0]["columns"] == ["cafe\u0301", "b", "c"]


def submit(organisation, model: bytes | None, work: str = "onnx-infer", params: dict | None = None):
    model_file = NamedFile(io.BytesIO(model), "scorer.onnx") if model is not None else None
    data = Data(file=NamedFile(io.BytesIO(table_csv(10)), "table.csv"))
    return services.submit_job(organisation, None, JobSpec(Work(work, params or {}, model_file), data, Request(1, 1)))


def test_a_job_is_refused_without_the_model_it_needs_or_with_one_it_cannot_use(organisation, online_slots, settings):
    for model, work, message in [
        (None, "onnx-infer", "onnx-infer needs an ONNX model"),
        (linear_model(), "clean-table", "clean-table takes no model file"),
        (b"\x08\x07garbage", "onnx-infer", "scorer.onnx: the model does not load"),
    ]:
        with pytest.raises(services.SubmitError, match=message) as refused:
            submit(organisation, model, work)
        assert refused.value.field == "model"
    with pytest.raises(services.SubmitError, match="inputs entry 'features' must be"):
        submit(organisation, linear_model(), params={"inputs": "features"})
    settings.E31_MAX_MODEL_BYTES = 100
    with pytest.raises(services.SubmitError, match="the limit is 100"):
        submit(organisation, linear_model())
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_partners_model_over_every_row(fleet, partner_client, rate_card):
    data = table_csv().replace(b"\n5,0.5,", b"\n5,0.5x,").replace(b"\n9,0.9,-1,", b"\n9,0.9,,")
    response = partner_client.post("/jobs/new/", onnx_form(data, linear_model(), gpus="2"))
    assert response.status_code == 302, response.content.decode()[:2000]
    job = wait_for_end(Job.objects.get(), timeout=120)
    assert job.state == State.SUCCEEDED, job.error
    assert job.shards.count() >= 4

    rows, rejects, manifest = output_of(partner_client, job)
    assert [(r["record"], r["line"], r["reason"]) for r in rejects] == [
        ("5", "6", "column 'a': '0.5x' is not a number"),
        ("9", "10", "column 'b': '' is empty"),
    ]
    assert [row["_record"] for row in rows] == [i for i in range(1, 1201) if i not in (5, 9)]
    features = np.array([[i / 10, (i % 7) - 3, 1.5 - i / 100] for i in (row["_record"] for row in rows)], "float32")
    expected = features @ WEIGHTS + BIAS
    assert np.allclose(np.array([row["score"] for row in rows], "float32"), expected, atol=1e-5)
    assert [row["label"] for row in rows] == expected.argmax(axis=1).tolist()
    assert manifest["work"]["plan"]["inputs"][0]["columns"] == ["a", "b", "c"]
    assert manifest["records"] == {"in": 1200, "out": 1198, "rejected": 2, "in_failed_shards": 0, "not_processed": 0}
    # Assembly deletes the staged copy, and the model with it, just after the job succeeds.
    gone = wait_for(lambda: not default_storage.exists(job.model_path), what="the model deleted with the staged copy")
    assert gone, "the model goes with the staged copy (deleted when done)"


@pytest.mark.django_db(transaction=True)
def test_the_cli_runs_a_model_whose_inputs_take_columns_of_their_names(fleet, organisation, partner, tmp_path):
    lines = [json.dumps({"id": i, "age": 20 + i / 4, "visits": i % 5}) for i in range(1, 301)]
    lines[99] = json.dumps({"id": 100, "age": 45.0, "visits": 2.5})
    data = write(tmp_path, "people.jsonl", "\n".join(lines).encode() + b"\n")
    model = write(tmp_path, "sum.onnx", sum_model())
    out = io.StringIO()
    call_command(
        "submit", "--org", organisation.slug, "--as", "partner",
        "--data", data, "--work", "onnx-infer", "--model", model,
        "--gpus", "2", "--hours", "1", "--wait", "--output", str(tmp_path / "out"), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    job = Job.objects.get(pk=json.loads(out.getvalue())["job"])
    assert job.state == State.SUCCEEDED and job.model_name == "sum.onnx"
    rows = pq.read_table(tmp_path / "out" / "output.parquet").to_pylist()
    assert rows == [{"_record": i, "total": 20 + i / 4 + i % 5} for i in range(1, 301) if i != 100], (
        "age + visits, each input fed from the column of its name"
    )
    rejects = list(csv.DictReader((tmp_path / "out" / "rejects.csv").open()))
    assert [r["reason"] for r in rejects] == ["column 'visits': 2.5 is not an integer"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ("features=a+b+town", "reads column 'town', which the data does not have (its columns: id, a, b, c, note)"),
        ("features=a+b", "takes 3 values per record, not the 2 of a+b"),
        ("feature=a+b+c", "inputs names 'feature', which the model does not take (it takes: features)"),
        ("", "reads column 'features', which the data does not have"),
    ],
)
def test_a_model_that_does_not_fit_the_data_fails_staging_before_any_gpu_is_held(
    fleet, partner_client, inputs, message
):
    response = partner_client.post("/jobs/new/", onnx_form(table_csv(20), linear_model(), inputs=inputs))
    assert response.status_code == 302
    job = wait_for_end(Job.objects.get())
    assert job.state == State.FAILED
    assert message in job.error
    assert not Allocation.objects.filter(job=job).exists(), "no compute was held for it"
