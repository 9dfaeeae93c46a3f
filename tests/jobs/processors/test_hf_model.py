"""The checks a partner's Hugging Face model passes on submit (jobs/processors/hf_model.py), over tiny
folders built here: none loads the weights, and only those that the real libraries save need torch."""

import bz2
import gzip
import io
import json
import lzma
import re
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from jobs.processors import ParamError, hf_model
from jobs.processors.partner_model import Embed
from tests import hf_models
from tests.hf_models import checkable_bert, edit_json, tarred_folder, zipped_folder
from tests.support import needs_libraries_of

needs_torch = needs_libraries_of(Embed())


def archive(tmp_path, folder, name: str = "model.zip") -> str:
    path = tmp_path / name
    path.write_bytes(tarred_folder(folder) if name.endswith(".tar") else zipped_folder(folder))
    return str(path)


def test_a_good_model_passes_and_is_described_from_its_headers(tmp_path):
    folder = checkable_bert(tmp_path / "bert")
    for name in ("model.zip", "model.tar"):
        facts = hf_model.check(archive(tmp_path, folder, name), "encoder")
        assert {key: facts[key] for key in ("model_type", "architecture", "hidden_size", "vocab_size", "files")} == {
            "model_type": "bert", "architecture": "BertModel", "hidden_size": 32, "vocab_size": 53, "files": 4,
        }  # fmt: skip
        assert len(facts["sha256"]) == 64


def unlink(name: str):
    return lambda folder: (folder / name).unlink()


def write(name: str, content: bytes):
    return lambda folder: (folder / name).write_bytes(content)


def pickle_only(folder):
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")


def truncated(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])


BAD_FOLDERS = {
    "pickle weights only": (pickle_only, "the weights are pickle files (pytorch_model.bin), which can run code"),
    "remote code": (
        lambda folder: (
            (folder / "tokenization_fancy.py").write_bytes(b"import os\n"),
            edit_json(folder / "tokenizer_config.json", auto_map={"AutoTokenizer": ["tokenization_fancy.Fancy", None]}),
        ),
        "tokenizer_config.json asks for its own code (auto_map); models are never run with trust_remote_code",
    ),
    "processor code": (
        write("preprocessor_config.json", b'{"auto_map": {"AutoImageProcessor": "fancy.FancyProcessor"}}'),
        "preprocessor_config.json asks for its own code (auto_map)",
    ),
    "auto_map": (
        lambda folder: edit_json(folder / "config.json", auto_map={"AutoModel": "fancy.FancyModel"}),
        "config.json asks for its own code (auto_map); models are never run with trust_remote_code",
    ),
    "unknown architecture": (
        lambda folder: edit_json(folder / "config.json", architectures=["FancyNet"]),
        "names the architecture 'FancyNet', which transformers does not know",
    ),
    "unknown model type": (
        lambda folder: edit_json(folder / "config.json", model_type="fancy"),
        "model_type 'fancy' is not one transformers knows",
    ),
    "tokenizer missing": (unlink("tokenizer.json"), "holds no tokenizer"),
    "vocabulary lie": (
        lambda folder: edit_json(folder / "config.json", vocab_size=30522),
        "config.json says vocab_size 30522 and hidden size 32, but the weights' "
        "embeddings.word_embeddings.weight is 53",
    ),
    "width lie": (
        lambda folder: edit_json(folder / "config.json", hidden_size=768),
        "says vocab_size 53 and hidden size 768, but the weights' embeddings.word_embeddings.weight is 53 × 32",
    ),
    "layer lie": (
        lambda folder: edit_json(folder / "config.json", num_hidden_layers=12),
        "config.json says 12 layers, but the weights hold 2",
    ),
    "truncated weights": (truncated, "model.safetensors is"),
    "no config": (unlink("config.json"), "holds no config.json: it is not a Hugging Face model folder"),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_a_bad_model_folder_is_refused_with_its_reason(tmp_path, case):
    change, message = BAD_FOLDERS[case]
    folder = checkable_bert(tmp_path / "bert")
    change(folder)
    with pytest.raises(ParamError, match=message.replace("(", r"\(").replace(")", r"\)")):
        hf_model.check(archive(tmp_path, folder), "encoder")


def zip_of(files: dict[str, bytes], compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as bundle:
        for name, content in files.items():
            bundle.writestr(name, content)
    return out.getvalue()


def tar_with_link(folder) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as bundle:
        bundle.add(folder, arcname="bert")
        link = tarfile.TarInfo("bert/secrets")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        bundle.addfile(link)
    return out.getvalue()


def test_an_archive_bomb_is_refused_before_anything_is_read(tmp_path, settings):
    folder = checkable_bert(tmp_path / "bert")
    files = {f"bert/{path.name}": path.read_bytes() for path in folder.iterdir()}
    cases = [
        (zip_of({**files, "../escape.txt": b"x"}), "'../escape.txt', a path outside the model folder"),
        (zip_of({**files, "/etc/cron.d/x": b"x"}), "'/etc/cron.d/x', a path outside the model folder"),
        (tar_with_link(folder), "'bert/secrets', a link"),
        (zip_of({**files, **{f"bert/extra/{n}.txt": b"" for n in range(300)}}), "holds more than 200 files"),
        (b"neither zip nor tar", "a model is its Hugging Face folder as a .zip or a .tar, and this is neither"),
        (gzip.compress(tarred_folder(folder)), "a compressed archive (.tar.gz, .tgz, .tar.bz2, .tar.xz, .tar.zst)"),
        (bz2.compress(tarred_folder(folder)), "is not read: send the folder as a plain .tar or a .zip"),
        (lzma.compress(tarred_folder(folder)), "is not read: send the folder as a plain .tar or a .zip"),
    ]
    for content, message in cases:
        path = tmp_path / "bomb"
        path.write_bytes(content)
        with pytest.raises(ParamError, match=message.replace("(", r"\(").replace(")", r"\)")):
            hf_model.check(str(path), "encoder")
    zeros = zip_of({**files, "bert/padding.txt": bytes(2_000_000)}, zipfile.ZIP_DEFLATED)
    (tmp_path / "bomb").write_bytes(zeros)
    with pytest.raises(ParamError, match=r"the archive's 'bert/padding.txt' expands 1,0\d\d times: a bomb"):
        hf_model.check(str(tmp_path / "bomb"), "encoder")
    settings.E31_MAX_MODEL_BYTES = 500_000
    bits = np.random.default_rng(0).integers(0, 2, 2_000_000, dtype=np.uint8).tobytes()
    large = zip_of({**files, "bert/padding.txt": bits}, zipfile.ZIP_DEFLATED)
    assert len(large) < 500_000, "the archive itself is within the limit"
    (tmp_path / "bomb").write_bytes(large)
    with pytest.raises(
        ParamError, match=r"the model expands to more than the 500\skB limit \(at 'bert/padding\.txt'\)"
    ):
        hf_model.check(str(tmp_path / "bomb"), "encoder")


def test_the_kind_must_fit_the_architecture(tmp_path):
    path = archive(tmp_path, checkable_bert(tmp_path / "bert"))
    with pytest.raises(ParamError, match="the model is not a sequence-classification model: its architectures are"):
        hf_model.check(path, "classify")
    with pytest.raises(ParamError, match="the model is not a causal language model: its architectures are BertModel"):
        hf_model.check(path, "generate")


APPLE_DOUBLE = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        "


def test_what_macos_adds_to_an_archive_is_passed_over(tmp_path):
    """Finder's zip (its __MACOSX folder and .DS_Store) and bsdtar's ._ files, of the files selected and
    of the folder zipped: the model is checked and unpacked as if they were not there."""
    folder = checkable_bert(tmp_path / "bert")
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    litter = {".DS_Store": b"\x00\x00\x00\x01Bud1", **{f"._{name}": APPLE_DOUBLE for name in files}}
    layouts = {
        "selected.zip": {**files, **litter, **{f"__MACOSX/._{name}": APPLE_DOUBLE for name in files}},
        "zipped.zip": {
            **{f"bert/{name}": content for name, content in {**files, **litter}.items()},
            **{f"__MACOSX/bert/._{name}": APPLE_DOUBLE for name in files},
        },
    }
    for name, members in layouts.items():
        path = tmp_path / name
        path.write_bytes(zip_of(members))
        assert hf_model.check(str(path), "encoder")["files"] == len(files) == 4, name
        unpacked = Path(hf_model.unpacked(str(path)).name)
        assert sorted(item.name for item in unpacked.rglob("*")) == sorted(files), name


def test_a_py_file_nothing_asks_for_passes_and_is_left_out_when_unpacked(tmp_path):
    """A Hub snapshot of all-MiniLM-L6-v2 ships the train_script.py it was trained with: without an
    auto_map nothing imports it, and models are never run with trust_remote_code."""
    folder = checkable_bert(tmp_path / "bert")
    (folder / "train_script.py").write_bytes(b"import os\n")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "convert.py").write_bytes(b"import sys\n")
    path = archive(tmp_path, folder)
    assert hf_model.check(path, "encoder")["model_type"] == "bert"
    unpacked = Path(hf_model.unpacked(path).name)
    assert not list(unpacked.rglob("*.py")) and (unpacked / "model.safetensors").exists()


def test_the_size_limit_counts_only_the_files_unpacked(tmp_path, settings):
    """Pickle weights beside the safetensors, a .py file, and a file outside the model folder are never
    unpacked: the model is within the limit whatever their size."""
    settings.E31_MAX_MODEL_BYTES = 500_000
    folder = checkable_bert(tmp_path / "bert")
    files = {f"bert/{path.name}": path.read_bytes() for path in folder.iterdir()}
    large = bytes(600_000)
    never_unpacked = {"bert/pytorch_model.bin": large, "bert/train_script.py": large, "notes/large.txt": large}
    path = tmp_path / "model.zip"
    path.write_bytes(zip_of({**files, **never_unpacked}))
    facts = hf_model.check(str(path), "encoder")
    assert (facts["files"], facts["bytes"]) == (4, sum(len(content) for content in files.values()))
    assert sorted(item.name for item in Path(hf_model.unpacked(str(path)).name).iterdir()) == sorted(
        name.removeprefix("bert/") for name in files
    )


@needs_torch
def test_a_sentence_transformers_folder_gives_its_pooling_as_the_pinned_library_saves_it(tmp_path):
    """sentence-transformers 6 saves its Pooling's mode as pooling_mode: a mode embed runs is taken, one it
    does not is refused rather than run as mean."""
    folder = hf_models.sentence_bert(tmp_path / "cls", "cls")
    facts = hf_model.check(archive(tmp_path, folder, "cls.zip"), "encoder")
    assert (facts["pooling"], facts["normalize"], facts["hidden_size"]) == ("cls", True, 32)
    folder = hf_models.sentence_bert(tmp_path / "max", "max")
    with pytest.raises(ParamError, match=r"^1_Pooling/config.json pools by max, which embed does not run"):
        hf_model.check(archive(tmp_path, folder, "max.zip"), "encoder")


def sentence_folder(folder, pooling: dict):
    """The checkable BERT as a sentence-transformers folder whose Pooling config is `pooling`."""
    checkable_bert(folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling}))
    return folder


def test_a_sentence_transformers_pooling_is_read_in_either_form_and_one_embed_cannot_run_is_refused(tmp_path):
    """The pooling_mode of sentence-transformers 6, or the flags of the versions before it (all-MiniLM-L6-v2's
    folder sets them): cls, mean and lasttoken are run, any other mode or several at once are refused."""
    taken = [
        ({"pooling_mode": "cls"}, "cls"),
        ({"pooling_mode": ["lasttoken"]}, "last"),
        ({"pooling_mode": "mean", "pooling_mode_cls_token": True}, "mean"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_lasttoken": True}, "last"),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}, "mean"),
        ({}, "mean"),
    ]
    for number, (pooling, mode) in enumerate(taken):
        path = archive(tmp_path, sentence_folder(tmp_path / f"taken-{number}", pooling), f"taken-{number}.zip")
        assert hf_model.check(path, "encoder")["pooling"] == mode, pooling
    refused = [
        ({"pooling_mode": "max"}, "pools by max, which embed does not run (it runs cls, mean, lasttoken)"),
        ({"pooling_mode": ["cls", "mean"]}, "pools by cls and mean at once; embed pools by one of cls, mean"),
        ({"pooling_mode": 3}, "pooling_mode is not a pooling mode or a list of them"),
        ({"pooling_mode_max_tokens": True}, "pools by max, which"),
        ({"pooling_mode_weightedmean_tokens": True}, "pools by weightedmean, which"),
        ({"pooling_mode_mean_sqrt_len_tokens": True}, "pools by mean_sqrt_len_tokens, which"),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, "pools by max and mean at once"),
    ]
    for number, (pooling, message) in enumerate(refused):
        path = archive(tmp_path, sentence_folder(tmp_path / f"refused-{number}", pooling), f"refused-{number}.zip")
        with pytest.raises(ParamError, match=re.escape(message)):
            hf_model.check(path, "encoder")


def without_architectures(folder):
    config = json.loads((folder / "config.json").read_text())
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_config_without_architectures_is_built_as_transformers_builds_it_for_its_model_type(tmp_path):
    """transformers' auto classes build a config that names no architectures from its model_type; a classifier
    is taken only with its head in the weights, which would otherwise be made up at random."""
    folder = without_architectures(checkable_bert(tmp_path / "bert"))
    path = archive(tmp_path, folder, "headless.zip")
    assert hf_model.check(path, "encoder")["architecture"] == "bert"
    with pytest.raises(
        ParamError, match=r"config\.json names no architectures, and its weights hold no classification"
    ):
        hf_model.check(path, "classify")
    weights = load_file(folder / "model.safetensors")
    weights |= {"classifier.weight": np.zeros((3, 32), np.float32), "classifier.bias": np.zeros(3, np.float32)}
    save_file(weights, folder / "model.safetensors")
    edit_json(folder / "config.json", id2label={"0": "no", "1": "maybe", "2": "yes"})
    facts = hf_model.check(archive(tmp_path, folder, "classifier.zip"), "classify")
    assert (facts["architecture"], facts["labels"]) == ("BertForSequenceClassification", ["no", "maybe", "yes"])
    edit_json(folder / "config.json", model_type="distilbert")
    with pytest.raises(ParamError, match="transformers has no causal language model for model_type 'distilbert'"):
        hf_model.check(archive(tmp_path, folder, "distilbert.zip"), "generate")


@needs_torch
def test_a_model_without_architectures_passes_as_the_class_transformers_loads_it_as(tmp_path):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification  # noqa: PLC0415

    generator = without_architectures(hf_models.gpt2(tmp_path / "gpt2"))
    classifier = without_architectures(hf_models.bert(tmp_path / "classifier", labels=["bad", "good"]))
    for folder, task, auto_class in [
        (generator, "generate", AutoModelForCausalLM),
        (classifier, "classify", AutoModelForSequenceClassification),
    ]:
        architecture = hf_model.check(archive(tmp_path, folder, f"{folder.name}.zip"), task)["architecture"]
        assert architecture == type(auto_class.from_pretrained(folder)).__name__, task


def test_a_sentence_transformers_folders_prompt_and_lowercasing_are_read_and_its_first_layout_refused(tmp_path):
    """Its default prompt (an E5's "query: ") goes before each text and its encoder's do_lower_case
    lowercases them, as sentence-transformers encodes; a prompt left out of the pooling is refused. The
    layout of its first versions, the encoder in 0_Transformer/ below modules.json, is refused saying how
    to save it again (read as it was, its pooling and unit length went unseen)."""
    folder = sentence_folder(tmp_path / "e5", {"pooling_mode": "mean"})
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "query"})
    )
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48, "do_lower_case": True}))
    facts = hf_model.check(archive(tmp_path, folder, "e5.zip"), "encoder")
    assert (facts["prompt"], facts["lowercase"], facts["max_length"]) == ("query: ", True, 48)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean", "include_prompt": False}))
    with pytest.raises(ParamError, match="pools without its default prompt's tokens"):
        hf_model.check(archive(tmp_path, folder, "e5-apart.zip"), "encoder")
    first = tmp_path / "first"
    checkable_bert(first / "0_Transformer")
    modules = [{"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"}]
    (first / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ParamError, match=r"keeps its encoder below its modules.json \(modules.json\), as the first"):
        hf_model.check(archive(tmp_path, first, "first.zip"), "encoder")


def checkable_image_reader(folder: Path, model_type: str, architecture: str) -> Path:
    """A folder of a model that also reads images, as Qwen3.5's and Gemma 3's are saved: its text stack's
    sizes in text_config, and its weights under language_model beside a vision tower of more layers."""
    folder = checkable_bert(folder)
    text = {"hidden_size": hf_models.HIDDEN, "vocab_size": 53, "num_hidden_layers": hf_models.LAYERS}
    config = {"model_type": model_type, "architectures": [architecture], "text_config": text}
    (folder / "config.json").write_text(json.dumps(config | {"vision_config": {"depth": 3}}))
    rng = np.random.default_rng(0)
    tensors = {"model.language_model.embed_tokens.weight": rng.standard_normal((53, 32), dtype=np.float32)}
    for layer in range(hf_models.LAYERS):
        tensors[f"model.language_model.layers.{layer}.mlp.weight"] = np.zeros((32, 32), np.float32)
    for block in range(3):
        tensors[f"model.visual.blocks.{block}.mlp.weight"] = np.zeros((32, 32), np.float32)
    save_file(tensors | {"lm_head.weight": np.zeros((53, 32), np.float32)}, folder / "model.safetensors")
    return folder


def test_a_model_that_also_reads_images_is_checked_by_its_language_model(tmp_path):
    """Its sizes are read from text_config and its layers counted in its language model's weights alone;
    where transformers' causal-LM class for it is its language model alone (Qwen3.5), that is what runs."""
    for model_type, architecture, built in [
        ("gemma3", "Gemma3ForConditionalGeneration", "Gemma3ForConditionalGeneration"),
        ("qwen3_5", "Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"),
    ]:
        folder = checkable_image_reader(tmp_path / model_type, model_type, architecture)
        facts = hf_model.check(archive(tmp_path, folder, f"{model_type}.zip"), "generate")
        assert (facts["architecture"], facts["hidden_size"], facts["vocab_size"]) == (built, 32, 53)
        with pytest.raises(ParamError, match="its weights hold no classification head"):
            hf_model.check(archive(tmp_path, folder, f"{model_type}.zip"), "classify")
        edit_json(folder / "config.json", text_config={"hidden_size": 32, "vocab_size": 53, "num_hidden_layers": 3})
        with pytest.raises(ParamError, match=r"config\.json says 3 layers, but the weights hold 2"):
            hf_model.check(archive(tmp_path, folder, f"{model_type}-lie.zip"), "generate")
    edit_json(folder / "config.json", model_type="llava", architectures=["LlavaForConditionalGeneration"])
    with pytest.raises(ParamError, match="not a causal language model: its architectures are LlavaForConditional"):
        hf_model.check(archive(tmp_path, folder, "llava.zip"), "generate")
