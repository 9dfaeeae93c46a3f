"""generate on a GPU slot where vLLM is installed: the slots are the fake NVML's GPUs, and vLLM is the fake
in tests/fakes/gpu_libraries, which keeps the real one's contract (its engine in a process of its own
unless told otherwise, max_model_len, one result per prompt) and takes its tokens from transformers."""

import json
import os

import pytest
from django.conf import settings

from jobs.models import Job, State
from tests import hf_models
from tests.hf_models import zipped_folder
from tests.jobs.processors.test_onnx_infer import output_of
from tests.jobs.processors.test_partner_model import needs_torch, upload
from tests.settings import PLUGIN_PATH, ROOT
from tests.support import Worker, job_form, wait_for_end, wait_for_slots

FAKE_VLLM = ROOT / "tests" / "fakes" / "gpu_libraries"
CALLS = settings.VAR_DIR / "fake-vllm-calls.txt"  # the prompts of each call to generate, a line each


@pytest.fixture(scope="module")
def gpu_node(django_db_setup, redis_server):
    """A gpuworker on one fake GPU that has the fake vLLM: every job runs on that one slot, so the next model's job
    runs where the first one's did, however loaded the machine is."""
    worker = Worker(
        f"vllm-{os.getpid()}", slots=1, gpus=True, PYTHONPATH=os.pathsep.join(map(str, (ROOT, PLUGIN_PATH, FAKE_VLLM))),
        E31_FAKE_VLLM_CALLS=str(CALLS),
    )  # fmt: skip
    yield worker
    worker.stop()


@needs_torch
@pytest.mark.django_db(transaction=True)
def test_generate_runs_on_vllm_in_a_gpu_slot_each_record_with_its_seed_and_room(gpu_node, partner_client, tmp_path):
    wait_for_slots(gpu_node)
    folder = hf_models.gpt2(tmp_path / "gpt2")
    topics = ["tea", "refund", "parcel " * 120, "invoice " * 130, "", "coffee", "cold"] * 3
    lines = [json.dumps({"id": n, "topic": topic}) for n, topic in enumerate(topics)]
    form = job_form(
        ("\n".join(lines) + "\n").encode(), name="topics.jsonl", work="generate", gpus="1",
        model=upload("gpt2.zip", zipped_folder(folder)),
        **{
            "param-generate-template": "the {topic} is", "param-generate-max_new_tokens": "12",
            "param-generate-temperature": "0.9", "param-generate-seed": "7", "param-generate-top_p": "0.9",
        },
    )  # fmt: skip
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=300)
    assert job.state == State.SUCCEEDED, job.error
    rows, rejects, _ = output_of(partner_client, job)
    too_long = "the prompt is 132 tokens; the model takes 128 at most, with at least one generated"
    assert [(int(r["record"]), r["reason"]) for r in rejects] == [
        (record, too_long) for record in range(4, len(topics) + 1, 7)
    ]
    assert [row["_record"] for row in rows] == [n for n in range(1, len(topics) + 1) if n % 7 != 4]
    for row in rows:
        prompt = f"the {topics[row['_record'] - 1]} is"
        room = 12 if len(prompt.split()) + 12 <= 128 else 128 - len(prompt.split())
        expected = hf_models.completion(folder, prompt, room, 7 + row["_record"], 0.9, 0.9)
        assert {name: row[name] for name in expected} == expected, row
    near = [row for row in rows if row["prompt_tokens"] == 122]
    assert len(near) == 3 and all(row["output_tokens"] <= 6 for row in near), "the 6 tokens left, not 12"


@needs_torch
@pytest.mark.django_db(transaction=True)
def test_the_next_model_on_a_slot_that_ran_vllm_gets_a_fresh_process(gpu_node, partner_client, tmp_path):
    """vLLM's engine keeps its GPU's memory in the process that made it: a slot asked for another model
    gives the shard back, uncounted, and a fresh process of its worker takes the hold over."""
    wait_for_slots(gpu_node)
    models = [
        hf_models.gpt2(tmp_path / "gpt2"),
        hf_models.gpt2(tmp_path / "spiece", hf_models.sentencepiece_tokenizer()),
    ]
    lines = "".join(json.dumps({"topic": topic}) + "\n" for topic in ["tea", "refund", "coffee", "parcel"] * 20)
    jobs = []
    for folder in models:
        form = job_form(
            lines.encode(), name="topics.jsonl", work="generate", gpus="1",
            model=upload(f"{folder.name}.zip", zipped_folder(folder)),
            **{"param-generate-template": "the {topic} is", "param-generate-max_new_tokens": "4"},
        )  # fmt: skip
        assert partner_client.post("/jobs/new/", form).status_code == 302
        jobs.append(wait_for_end(Job.objects.latest("pk"), timeout=300))
        assert jobs[-1].state == State.SUCCEEDED, jobs[-1].error
    first, second = ({(shard.gpu_id, shard.worker_pid) for shard in job.shards.all()} for job in jobs)
    assert {gpu for gpu, _ in first} & {gpu for gpu, _ in second}, "a slot ran both"
    assert not first & second, "no process ran both models"
    assert all(shard.attempts == 1 for shard in jobs[1].shards.all()), "a shard given back is not counted"
    rows, _, _ = output_of(partner_client, jobs[1])
    assert rows[0] == {"_record": 1, **hf_models.completion(models[1], "the tea is", 4, 0, 0, 1.0)}


@needs_torch
@pytest.mark.django_db(transaction=True)
def test_a_gpu_slot_hands_vllm_a_shards_prompts_at_once_not_a_cpu_batch_of_them(gpu_node, partner_client, tmp_path):
    """vLLM keeps hundreds of sequences going at once: a GPU slot's batches of prompts are not cut at the
    64 of a CPU slot's."""
    wait_for_slots(gpu_node)
    CALLS.unlink(missing_ok=True)
    lines = "".join(json.dumps({"topic": topic}) + "\n" for topic in ["tea", "refund", "coffee", "parcel"] * 140)
    form = job_form(
        lines.encode(), name="topics.jsonl", work="generate", gpus="1",
        model=upload("gpt2.zip", zipped_folder(hf_models.gpt2(tmp_path / "gpt2"))),
        **{"param-generate-template": "the {topic} is", "param-generate-max_new_tokens": "1"},
    )  # fmt: skip
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=300)
    assert job.state == State.SUCCEEDED, job.error
    calls = [int(line) for line in CALLS.read_text().split()]
    assert sum(calls) == 560 and max(calls) == max(shard.record_count for shard in job.shards.all()) > 64
