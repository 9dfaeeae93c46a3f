"""A partner's Hugging Face model: the folder (config.json, safetensors weights, a tokenizer) as a .zip
or a .tar, checked when the job is submitted and unpacked on the slot that runs it.

The check reads the archive's index and a few small files, never the weights themselves:
- every member stays inside the folder: no absolute path or `..`, no link or device, at most
  E31_MODEL_MAX_FILES files, no zip member that expands like a bomb;
- the files unpacked on a slot come to at most E31_MAX_MODEL_BYTES;
- what macOS adds when it archives a folder (__MACOSX/, ._ files, .DS_Store) is passed over, never
  read nor unpacked;
- the weights are safetensors: pickle files (.bin, .pt, ...) are never read, so a model with only
  those is refused;
- no code of its own: an `auto_map` in its config, its tokenizer's or its processor's asks for
  trust_remote_code, which is never given. A .py file nothing asks for (a Hub snapshot's
  train_script.py) cannot run without it, and is left out when unpacked;
- its architecture is one transformers knows, looked up in transformers' own tables by name (nothing
  from the folder is imported), and one the work kind runs. A config that names none gets the class
  transformers builds for its model_type, and a classifier then needs its head in the weights;
- a tokenizer is there;
- a sentence-transformers folder holds only the modules embed runs itself: its encoder, a pooling by
  one mode (cls, mean or lasttoken), and unit length. Its Pooling config is read in either form:
  sentence-transformers 6's pooling_mode, or the flag per mode of the versions before it;
- the config tells the truth: its vocabulary, width and layer count match the tensor shapes the
  safetensors headers give.
"""

import hashlib
import json
import re
import struct
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from django.conf import settings

from jobs.processors.base import ParamError
from jobs.processors.transformers_tables import mapping_names
from portal import units

COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd")  # gzip, bzip2, xz, zstd
PICKLE_SUFFIXES = frozenset({".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack"})
NOT_UNPACKED = PICKLE_SUFFIXES | {".py"}  # a pickle runs code when loaded, and a slot imports no .py file
# The settings files where an auto_map may name the folder's own classes for transformers' Auto classes.
CODE_SETTINGS = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
# The files that make a tokenizer transformers can load without code, any one set of them.
TOKENIZER_SETS = (
    {"tokenizer.json"},
    {"vocab.txt"},
    {"vocab.json", "merges.txt"},
    {"tokenizer.model"},
    {"spiece.model"},
    {"sentencepiece.bpe.model"},
)
SMALL_FILE_BYTES = 4 * 1024 * 1024  # config and tokenizer settings are read whole: kilobytes in practice
MAX_HEADER_BYTES = 64 * 1024 * 1024  # a safetensors header lists the tensors: megabytes for the largest models
MAX_RATIO = 1000  # a zip member that expands more than this is a bomb; weights barely compress
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
DTYPE_BYTES |= {"F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
# The token embedding's weight, by the names transformers' models give it (ModernBERT's tok_embeddings;
# Mamba's and RWKV's embeddings, named beside their backbone, not a position table's).
EMBEDDING_NAMES = (
    "word_embeddings.weight", "wte.weight", "embed_tokens.weight", "shared.weight", "embed_in.weight",
    "tok_embeddings.weight", "backbone.embeddings.weight", "rwkv.embeddings.weight",
)  # fmt: skip
# A layer's index in a weight's name: the first one, so that T5's encoder.block.3.layer.1 is its block 3.
LAYER_INDEX = re.compile(r"\.(?:block|blocks|layers|layer|h)\.(\d+)\.")
# The modules transformers' sequence classifiers put on their model, as their weights' names give them.
CLASSIFIER_HEADS = {"classifier", "score", "classification_head", "logits_proj", "sequence_summary"}
TASK_MODELS = {"classify": "sequence-classification", "generate": "causal language"}
# Sentence-transformers modules this runs itself: the encoder, its pooling, and unit length.
SENTENCE_MODULES = {"Transformer", "Pooling", "Normalize"}
# sentence-transformers' pooling modes that embed runs (pool() in partner_model.py), by embed's names for them.
POOLING_MODES = {"cls": "cls", "mean": "mean", "lasttoken": "last"}
# Before sentence-transformers 6 its Pooling config set a flag per mode; it reads them in this order.
POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class Member:
    name: str  # the path inside the model folder
    archived: str  # the path inside the archive
    size: int


class _Archive:
    """A .zip or .tar of a model folder, its members checked before any is read."""

    def __init__(self, stream: BinaryIO):
        head = stream.read(512)
        stream.seek(0)
        if head.startswith(b"PK\x03\x04"):
            self.zip, self.tar = zipfile.ZipFile(stream), None
        elif head[257:262] == b"ustar":
            # Read within the caller's `with` on the stream, which outlives it.
            self.zip, self.tar = None, tarfile.open(fileobj=stream, mode="r:")  # noqa: SIM115
        elif head.startswith(COMPRESSED):
            raise ParamError(
                "a compressed archive (.tar.gz, .tgz, .tar.bz2, .tar.xz, .tar.zst) is not read: send the folder as a "
                "plain .tar or a .zip (e31 submit --model FOLDER packs it)"
            )
        else:
            raise ParamError("a model is its Hugging Face folder as a .zip or a .tar, and this is neither")
        self.files = self._files()

    def _files(self) -> list[tuple[str, str, int]]:
        """(path in the folder's terms, path as archived, size) of each file but macOS's metadata."""
        found = []
        entries = self.zip.infolist() if self.zip else self.tar.getmembers()
        for entry in entries:
            name = entry.filename if self.zip else entry.name
            path = PurePosixPath(name.replace("\\", "/"))
            if path.is_absolute() or ".." in path.parts:
                raise ParamError(f"the archive holds {name!r}, a path outside the model folder")
            if self._is_link(entry):
                raise ParamError(f"the archive holds {name!r}, a link")
            if self.tar and not (entry.isfile() or entry.isdir()):
                raise ParamError(f"the archive holds {name!r}, which is not a file")
            if (self.zip and entry.is_dir()) or (self.tar and entry.isdir()) or _is_macos_metadata(path):
                continue
            size = entry.file_size if self.zip else entry.size
            if self.zip and size > 1024 * 1024 and size > MAX_RATIO * max(1, entry.compress_size):
                raise ParamError(
                    f"the archive's {name!r} expands {size // max(1, entry.compress_size):,} times: a bomb"
                )
            found.append((str(path), name, size))
            if len(found) > settings.E31_MODEL_MAX_FILES:
                raise ParamError(f"the archive holds more than {settings.E31_MODEL_MAX_FILES:,} files")
        return found

    def _is_link(self, entry) -> bool:
        if self.zip:
            return (entry.external_attr >> 16) & 0o170000 == 0o120000
        return entry.issym() or entry.islnk()

    def open(self, archived: str) -> BinaryIO:
        return self.zip.open(archived) if self.zip else self.tar.extractfile(archived)


def _is_macos_metadata(path: PurePosixPath) -> bool:
    """Whether the path is one macOS adds to a folder it archives, never part of the model: Finder's zip
    keeps each file's attributes under __MACOSX/, bsdtar in a ._ file (AppleDouble) beside it, and Finder
    leaves a .DS_Store in a folder it has shown."""
    return path.parts[:1] == ("__MACOSX",) or path.name.startswith("._") or path.name == ".DS_Store"


def _unpacks(member: Member) -> bool:
    return PurePosixPath(member.name).suffix not in NOT_UNPACKED


def _folder(files: list[tuple[str, str, int]]) -> list[Member]:
    """The members of the model folder: those beside the shallowest config.json, the folder's root. Those
    unpacked come to at most E31_MAX_MODEL_BYTES; the rest are never written, and count for nothing."""
    configs = [name for name, _, _ in files if PurePosixPath(name).name == "config.json"]
    if not configs:
        raise ParamError("the archive holds no config.json: it is not a Hugging Face model folder")
    root = min((PurePosixPath(name).parent for name in configs), key=lambda parent: len(parent.parts))
    above = [name for name, _, _ in files if PurePosixPath(name).name == "modules.json" and _above(name, root)]
    if above:
        raise ParamError(
            f"the sentence-transformers folder keeps its encoder below its modules.json ({above[0]}), as the "
            "first versions saved it: save it again with a current sentence-transformers "
            "(SentenceTransformer(folder).save(new_folder)) and send that"
        )
    prefix = "" if str(root) == "." else f"{root}/"
    members = [Member(name[len(prefix) :], archived, size) for name, archived, size in files if name.startswith(prefix)]
    total = 0
    for member in filter(_unpacks, members):
        total += member.size
        if total > settings.E31_MAX_MODEL_BYTES:
            limit = units.limit(settings.E31_MAX_MODEL_BYTES)
            raise ParamError(f"the model expands to more than the {limit} limit (at {member.archived!r})")
    return members


def _above(name: str, root: PurePosixPath) -> bool:
    """Whether the file `name` lies in a folder that holds `root`, not in `root` itself."""
    folder = PurePosixPath(name).parent
    return folder != root and (str(folder) == "." or folder in root.parents)


def _read_json(archive: _Archive, member: Member) -> dict:
    if member.size > SMALL_FILE_BYTES:
        raise ParamError(f"{member.name} is {units.size(member.size)}; a settings file is far smaller")
    with archive.open(member.archived) as handle:
        try:
            found = json.loads(handle.read(SMALL_FILE_BYTES + 1))
        except (ValueError, UnicodeDecodeError):
            raise ParamError(f"{member.name} is not JSON") from None
    if not isinstance(found, dict):
        raise ParamError(f"{member.name} is not a JSON object")
    return found


def _tensors(archive: _Archive, member: Member) -> dict[str, list[int]]:
    """Each tensor's shape as the file's header says, once the header is found to fit the file."""
    with archive.open(member.archived) as handle:
        first = handle.read(8)
        length = struct.unpack("<Q", first)[0] if len(first) == 8 else -1
        if not 2 <= length <= min(MAX_HEADER_BYTES, member.size - 8):
            raise ParamError(f"{member.name} is not a safetensors file (its header length is not within the file)")
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError):
            raise ParamError(f"{member.name} is not a safetensors file (its header is not JSON)") from None
    header.pop("__metadata__", None)
    shapes, end = {}, 0
    for name, tensor in header.items():
        try:
            shape, (start, stop) = [int(n) for n in tensor["shape"]], tensor["data_offsets"]
            count = DTYPE_BYTES[tensor["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise ParamError(f"{member.name}'s header describes {name!r} in a way safetensors does not") from None
        for size in shape:
            count *= size
        if stop - start != count or min(shape, default=1) < 0:
            raise ParamError(f"{member.name}'s header gives {name!r} {stop - start:,} bytes for shape {shape}")
        shapes[name], end = shape, max(end, stop)
    if 8 + length + end != member.size:
        raise ParamError(f"{member.name} is {member.size:,} bytes; its header accounts for {8 + length + end:,}")
    return shapes


MODELING_AUTO = "transformers.models.auto.modeling_auto"


@cache
def _architectures() -> dict[str, set[str]]:
    """transformers' own tables of model types and the classes it builds for them, by task."""
    # Names only: the tables are plain dictionaries, and no code from the partner's folder is imported.
    from transformers.models.auto import configuration_auto  # noqa: PLC0415 (imports without torch)

    def names(table: dict) -> set[str]:
        return {name for value in table.values() for name in ((value,) if isinstance(value, str) else value)}

    tables = mapping_names(MODELING_AUTO)
    return {
        "types": set(configuration_auto.CONFIG_MAPPING_NAMES),
        "any": set().union(*map(names, tables.values())),
        "encoder": set(tables["MODEL_MAPPING_NAMES"]),
        **{task: names(table) for task, table in _auto_classes().items()},
    }


def _auto_classes() -> dict[str, dict[str, str]]:
    """For each task, the class its transformers auto class (AutoModelForSequenceClassification,
    AutoModelForCausalLM) builds for a model_type: what it builds from a config that names no architectures."""
    tables = mapping_names(MODELING_AUTO)
    return {
        "classify": tables["MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"],
        "generate": tables["MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"],
    }


def _check_code(archive: _Archive, members: dict[str, Member], config: dict) -> None:
    for settings_file in CODE_SETTINGS:
        found = config if settings_file == "config.json" else None
        if found is None and settings_file in members:
            found = _read_json(archive, members[settings_file])
        if found and "auto_map" in found:
            raise ParamError(
                f"the model's {settings_file} asks for its own code (auto_map); "
                "models are never run with trust_remote_code"
            )


def _check_architecture(config: dict, task: str, shapes: dict[str, list[int]]) -> str:
    """The architecture the work builds: one transformers knows, for the task."""
    known = _architectures()
    model_type = config.get("model_type")
    if model_type not in known["types"]:
        raise ParamError(f"config.json's model_type {model_type!r} is not one transformers knows")
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(isinstance(name, str) for name in architectures):
        raise ParamError("config.json's architectures is not a list of names")
    unknown = [name for name in architectures if name not in known["any"]]
    if unknown:
        raise ParamError(f"config.json names the architecture {unknown[0]!r}, which transformers does not know")
    if task == "encoder":
        if model_type not in known["encoder"]:
            raise ParamError(f"transformers has no encoder for model_type {model_type!r}")
        return architectures[0] if architectures else model_type
    if not architectures:
        return _architecture_by_type(model_type, task, shapes)
    fitting = [name for name in architectures if name in known[task]]
    if not fitting and isinstance(config.get("text_config"), dict) and model_type in _auto_classes()[task]:
        # A model that also reads images (Qwen3.5's ...ForConditionalGeneration): transformers' auto class
        # builds its language model alone, from the same weights.
        return _architecture_by_type(model_type, task, shapes)
    if not fitting:
        raise ParamError(
            f"the model is not a {TASK_MODELS[task]} model: its architectures are {', '.join(architectures)}"
        )
    return fitting[0]


def _architecture_by_type(model_type: str, task: str, shapes: dict[str, list[int]]) -> str:
    """The architecture for a config that names none: the class transformers' auto class for the task
    builds for its model_type. A classifier's head must be in the weights, else transformers would make
    one up at random."""
    architecture = _auto_classes()[task].get(model_type)
    if architecture is None:
        raise ParamError(
            f"config.json names no architectures, and transformers has no {TASK_MODELS[task]} model "
            f"for model_type {model_type!r}"
        )
    if task == "classify" and not any(CLASSIFIER_HEADS & set(name.split(".")) for name in shapes):
        raise ParamError(
            "the model is not a sequence-classification model: config.json names no architectures, and "
            "its weights hold no classification head (classifier, score, ...)"
        )
    return architecture


def _first(config: dict, *keys: str):
    return next((config[key] for key in keys if isinstance(config.get(key), int)), None)


def _language_model(config: dict, shapes: dict[str, list[int]]) -> tuple[dict, dict[str, list[int]]]:
    """The config and weights of the model's language model. A model that also reads images (Gemma 3,
    Qwen3.5, Llama 4) gives its text stack's sizes in config.json's text_config, and keeps its weights
    beside its vision tower's under language_model; any other model is its own language model."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        return config, shapes
    own = {name: shape for name, shape in shapes.items() if "language_model" in name.split(".")}
    return {**config, **text}, own or shapes


def _check_sizes(config: dict, shapes: dict[str, list[int]]) -> tuple[int, int]:
    """The width and vocabulary the config gives, once the weights agree with them."""
    config, shapes = _language_model(config, shapes)
    width = _first(config, "hidden_size", "n_embd", "n_embed", "d_model", "dim")
    vocab = _first(config, "vocab_size")
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    if not width or not vocab:
        raise ParamError("config.json gives no hidden_size or vocab_size")
    embedding = next(
        (name for name, shape in shapes.items() if name.endswith(EMBEDDING_NAMES) and len(shape) == 2), None
    )
    if embedding is None:
        raise ParamError("the weights hold no token embedding (word_embeddings, wte, embed_tokens)")
    # ALBERT, ELECTRA and OPT-350m embed narrower, then project.
    embedded = _first(config, "embedding_size", "word_embed_proj_dim") or width
    if shapes[embedding] != [vocab, embedded]:
        raise ParamError(
            f"config.json says vocab_size {vocab} and hidden size {embedded}, but the weights' {embedding} "
            f"is {shapes[embedding][0]} × {shapes[embedding][1]}"
        )
    indexes = {int(match.group(1)) for name in shapes if (match := LAYER_INDEX.search(name))}
    stacks = config.get("is_encoder_decoder")  # two stacks of layers, each counted in its own key
    if layers is not None and indexes and not stacks and max(indexes) + 1 != layers:
        raise ParamError(f"config.json says {layers} layers, but the weights hold {max(indexes) + 1}")
    return width, vocab


def _sentence_modules(archive: _Archive, members: dict[str, Member]) -> dict:
    """A sentence-transformers folder's pooling and normalisation; {} for a plain transformers one."""
    if "modules.json" not in members:
        return {}
    with archive.open(members["modules.json"].archived) as handle:
        try:
            modules = json.loads(handle.read(SMALL_FILE_BYTES))
        except (ValueError, UnicodeDecodeError):
            raise ParamError("modules.json is not JSON") from None
    if not isinstance(modules, list) or not all(isinstance(module, dict) for module in modules):
        raise ParamError("modules.json is not a list of modules")
    kinds = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
    if other := [kind for kind in kinds if kind not in SENTENCE_MODULES]:
        raise ParamError(
            f"the sentence-transformers module {other[0]!r} is not run here "
            f"(only {', '.join(sorted(SENTENCE_MODULES))})"
        )
    found = {"normalize": "Normalize" in kinds}
    if "sentence_bert_config.json" in members:  # the encoder's input limit, below its positions'
        encoder = _read_json(archive, members["sentence_bert_config.json"])
        limit = encoder.get("max_seq_length")
        if isinstance(limit, int) and limit > 0:
            found["max_length"] = limit
        if encoder.get("do_lower_case") is True:  # sentence-transformers lowercases the text first
            found["lowercase"] = True
    pooling = next((module for module, kind in zip(modules, kinds, strict=True) if kind == "Pooling"), None)
    pooling_config = {}
    if pooling is not None:
        path = f"{pooling.get('path', '')}/config.json".lstrip("/")
        if path in members:
            pooling_config = _read_json(archive, members[path])
            found["pooling"] = _pooling(pooling_config, path)
    if prompt := _default_prompt(archive, members):
        if pooling_config.get("include_prompt") is False:
            raise ParamError(
                "the sentence-transformers folder pools without its default prompt's tokens, which embed does not run"
            )
        found["prompt"] = prompt
    return found


def _default_prompt(archive: _Archive, members: dict[str, Member]) -> str:
    """The text sentence-transformers puts before each one it encodes: the prompt its settings name as the
    default (an E5's "query: "), or ""."""
    if "config_sentence_transformers.json" not in members:
        return ""
    settings_found = _read_json(archive, members["config_sentence_transformers.json"])
    prompts, default = settings_found.get("prompts") or {}, settings_found.get("default_prompt_name")
    prompt = prompts.get(default, "") if isinstance(prompts, dict) and isinstance(default, str) else ""
    return prompt if isinstance(prompt, str) else ""


def _pooling(config: dict, path: str) -> str:
    """The pooling embed runs for a sentence-transformers Pooling config: its pooling_mode, a mode or a list
    of them (version 6), else the flags set (mean where none is, as sentence-transformers reads them)."""
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else modes
    else:
        modes = [mode for flag, mode in POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    if not isinstance(modes, list) or not modes or not all(isinstance(mode, str) for mode in modes):
        raise ParamError(f"{path}'s pooling_mode is not a pooling mode or a list of them")
    runs = ", ".join(POOLING_MODES)
    if len(modes) > 1:
        raise ParamError(f"{path} pools by {' and '.join(modes)} at once; embed pools by one of {runs}")
    if modes[0] not in POOLING_MODES:
        raise ParamError(f"{path} pools by {modes[0]}, which embed does not run (it runs {runs})")
    return POOLING_MODES[modes[0]]


def check(path: str, task: str) -> dict:
    """What the work needs to know of the model archive at `path`; ParamError says why it cannot be run.
    `task`: "encoder", "classify" or "generate"."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(8 * 1024 * 1024):
            digest.update(block)
        stream.seek(0)
        try:
            archive = _Archive(stream)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError) as error:
            raise ParamError(f"the archive cannot be read: {error}") from None
        members = {member.name: member for member in _folder(archive.files)}
        config = _read_json(archive, members["config.json"])
        _check_code(archive, members, config)
        weights = sorted(name for name in members if name.endswith(".safetensors"))
        if not weights:
            pickles = sorted(name for name in members if PurePosixPath(name).suffix in PICKLE_SUFFIXES)
            if pickles:
                raise ParamError(
                    f"the weights are pickle files ({pickles[0]}), which can run code when loaded; "
                    "save them as safetensors"
                )
            raise ParamError("the model folder holds no weights (.safetensors)")
        if not any(wanted <= set(members) for wanted in TOKENIZER_SETS):
            raise ParamError("the model folder holds no tokenizer (tokenizer.json, vocab.txt, ...)")
        shapes = {}
        for name in weights:
            shapes |= _tensors(archive, members[name])
        architecture = _check_architecture(config, task, shapes)
        width, vocab = _check_sizes(config, shapes)
        sentence = _sentence_modules(archive, members)
    unpacked_members = [member for member in members.values() if _unpacks(member)]
    facts = {
        "sha256": digest.hexdigest(),
        "model_type": config["model_type"],
        "architecture": architecture,
        "hidden_size": width,
        "vocab_size": vocab,
        "parameters": sum(_count(shape) for shape in shapes.values()),
        "bytes": sum(member.size for member in unpacked_members),
        "files": len(unpacked_members),
        **sentence,
    }
    if task == "classify":
        facts["labels"] = _labels(config)
    return facts


def _count(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _labels(config: dict) -> list[str]:
    """The classifier's label names in index order: its id2label, or LABEL_0, LABEL_1, ..."""
    id2label = config.get("id2label") or {}
    count = len(id2label) or _first(config, "num_labels") or 2
    return [str(id2label.get(str(index), id2label.get(index, f"LABEL_{index}"))) for index in range(count)]


@lru_cache(maxsize=2)
def unpacked(path: str) -> tempfile.TemporaryDirectory:
    """The model archive at `path` unpacked into a folder of its own, checked again first; its pickle and
    .py files are left out. Kept for the next batches of the job; removed once dropped or at exit."""
    folder = tempfile.TemporaryDirectory(prefix="e31-model-")
    with open(path, "rb") as stream:
        archive = _Archive(stream)
        for member in _folder(archive.files):
            if not _unpacks(member):
                continue
            target = Path(folder.name, member.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member.archived) as source, target.open("wb") as copy:
                while block := source.read(8 * 1024 * 1024):
                    copy.write(block)
    return folder
