"""embed, classify and generate: the partner's own Hugging Face model over every record.

The model comes with the job as its folder in a .zip or .tar, checked on submit and again when
staged (hf_model.py), and unpacked once on each slot that runs it. Its libraries (torch and
transformers) are imported only in a slot.

Throughput: a slot's batch is cut into model batches of texts of similar length (fewer pad tokens),
the next one tokenized in a thread while the model runs the current one; on a GPU the model runs in
bfloat16 (where the GPU lacks it, float16 for a model saved so, else float32). A model batch's size,
unless the partner gives one, is what fits the GPU's free memory: measured once per model and length by
a forward pass over a few rows of the longest input they reach, its keys and values cached (CPU_BATCH
on a CPU slot). `generate` runs on vLLM on a GPU slot where it is installed, and transformers'
`generate` everywhere else. A record whose output is not a number (NaN) is rejected, not written.
"""

import gc
import importlib.util
import inspect
import json
import os
import string
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from jobs.processors.base import Batch, Context, Param, ParamError, Processor, ProcessSpent, Record, data_column
from jobs.processors.embed_text import slot_threads, text_column, text_of, texts_of
from jobs.processors.hf_model import check as check_hf_model
from jobs.processors.hf_model import unpacked
from jobs.processors.onnx_infer import local_model

MODEL_FILE = "a Hugging Face model folder as a .zip or .tar (safetensors weights, config.json, a tokenizer)"
CHOICES = {
    "pooling": ("auto", "mean", "cls", "last"),
    "normalise": ("auto", "yes", "no"),
    "dtype": ("float32", "float16"),
    "all_scores": ("no", "yes"),
}
BATCH_SIZE = Param(
    "batch_size", str, "auto",
    "Records the model runs at once: auto (as many as fit the GPU's free memory, measured when the model is "
    "loaded; 32 on a CPU slot), or a number from 1 to 4096.",
)  # fmt: skip
CPU_BATCH = 32  # on a CPU slot a larger batch runs no faster per record, and pads more
MAX_BATCH = 4096
HEADROOM = 0.8  # the share of the GPU's free memory the batches may fill
PROBE_ROWS = 4  # rows of the longest input the model takes, run once to measure the memory a token takes


def _batch_size(raw: str) -> str | int:
    value = raw.strip().lower()
    if value == "auto":
        return value
    if not value.isdigit() or not 1 <= int(value) <= MAX_BATCH:
        raise ParamError(f"batch_size must be auto or a whole number from 1 to {MAX_BATCH}, not {raw!r}")
    return int(value)


def batch_size(params: dict, network, longest: int) -> int:
    """The records the model runs at once: the number given, or for auto as many of `longest` tokens as
    fit the GPU's free memory with headroom (CPU_BATCH on a CPU slot)."""
    if params["batch_size"] != "auto":
        return params["batch_size"]
    if network.device.type != "cuda":
        return CPU_BATCH
    return fitting_batch(*_gpu_memory(network, longest), longest)


def fitting_batch(free: int, per_token: float, longest: int) -> int:
    """Rows of `longest` tokens that fit HEADROOM of `free` bytes at `per_token` bytes a token."""
    return max(1, min(MAX_BATCH, int(free * HEADROOM / max(per_token * longest, 1))))


@lru_cache(maxsize=8)
def _gpu_memory(network, longest: int) -> tuple[int, float]:
    """(bytes free on the model's GPU, bytes a token of input takes), measured once per model and length:
    the peak of one probe."""
    import torch  # noqa: PLC0415 (a slot's library, loaded with the model)

    device = network.device
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    probe(network, longest)
    per_token = (torch.cuda.max_memory_allocated(device) - before) / (PROBE_ROWS * longest)
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info(device)[0], per_token


def probe(network, longest: int):
    """A forward pass over PROBE_ROWS rows of `longest` tokens as a batch runs them: a causal LM caches its
    keys and values and keeps the last position's logits alone, as generate does (every position's would
    take rows × longest × its vocabulary, 40 GB for a 0.5B model's 32k window)."""
    import torch  # noqa: PLC0415 (a slot's library, loaded with the model)

    tokens = torch.ones((PROBE_ROWS, longest), dtype=torch.long, device=network.device)
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(network.forward).parameters else {}
    with torch.inference_mode():
        return network(input_ids=tokens, attention_mask=torch.ones_like(tokens), **last_only)


def reach(counts: list[int], new_tokens: int, limit: int) -> int:
    """The longest sequence a batch of prompts of these token counts reaches, generated tokens included,
    rounded up to a power of two (one measurement serves the batches of similar reach), within `limit`."""
    return min(limit, 1 << (max(counts) + new_tokens - 1).bit_length())


YES_NO = {"true": "yes", "false": "no"}  # JSON's true and false (the API takes them), as yes and no


def _choice(params: dict, name: str) -> str:
    value = params[name].strip().lower()
    if "yes" in CHOICES[name]:
        value = YES_NO.get(value, value)
    if value not in CHOICES[name]:
        raise ParamError(f"{name} must be one of {', '.join(CHOICES[name])}, not {params[name]!r}")
    return value


_kept: dict[tuple, object] = {}


def kept(key: tuple, build: Callable):
    """What build() gives for `key` (a model loaded), kept for the job's next batches until another key is
    asked for. The one kept before is let go first: a slot holds one model at a time, in its memory or its
    GPU's, and the next job's model does not have to fit beside the last one's. ProcessSpent when the one
    kept cannot be let go (its `lets_go` is False)."""
    if key not in _kept:
        if not all(getattr(value, "lets_go", True) for value in _kept.values()):
            raise ProcessSpent(f"its model, in {type(next(iter(_kept.values()))).__name__}, cannot be let go")
        _kept.clear()
        _gpu_memory.cache_clear()  # it holds the last model's network
        gc.collect()
        if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
            sys.modules["torch"].cuda.empty_cache()
        _kept[key] = build()
    return _kept[key]


def _tokenizer(model: str, task: str):
    from transformers import AutoTokenizer  # noqa: PLC0415 (a slot's library, imported where it runs)

    folder = unpacked(local_model(model)).name
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    tokenizer.padding_side = "left" if task == "generate" else "right"  # last-token pooling reads the right end
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load(model: str, device: str, task: str):
    """(tokenizer, model) for the job's model in storage, loaded once per slot process and job."""
    return kept(("model", model, device, task), lambda: _load(model, device, task))


def _load(model: str, device: str, task: str):
    # Only a slot runs a model: its libraries come with requirements-gpu.txt and are imported here.
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification  # noqa: PLC0415

    torch.set_num_threads(slot_threads())
    folder = unpacked(local_model(model)).name
    config = json.loads(Path(folder, "config.json").read_text())
    dtype = torch.float32
    if device == "cuda":
        saved = config.get("dtype") or config.get("torch_dtype")
        dtype = getattr(torch, gpu_dtype(torch.cuda.is_bf16_supported(), saved))
    builder = {"encoder": AutoModel, "classify": AutoModelForSequenceClassification, "generate": AutoModelForCausalLM}
    options = {"local_files_only": True, "trust_remote_code": False}
    named = (config.get("architectures") or [""])[0]
    if task == "encoder" and named.endswith("EncoderModel"):  # T5EncoderModel: AutoModel would build the whole T5
        builder["encoder"] = getattr(transformers, named)  # a class of transformers' own, as the check found it
    network = builder[task].from_pretrained(folder, use_safetensors=True, dtype=dtype, **options)
    if task == "encoder" and network.config.is_encoder_decoder:
        network = network.get_encoder()  # embed reads the encoder's states (T5's, BART's)
    tokenizer = _tokenizer(model, task)
    if task == "classify" and network.config.pad_token_id is None:
        network.config.pad_token_id = tokenizer.pad_token_id  # a decoder classifier reads each text's last token
    if task == "generate":
        network.generation_config = own_tokens_only(network.generation_config)
    return tokenizer, network.to(device).eval()


def gpu_dtype(bf16: bool, saved: str | None) -> str:
    """The type a model runs in on a GPU: bfloat16 where the GPU has it; else float16 for a model saved in
    float16, and float32 for one saved in bfloat16 or float32, whose values may pass float16's range."""
    if bf16:
        return "bfloat16"
    return "float16" if saved == "float16" else "float32"


def own_tokens_only(settings):
    """The model's generation settings with its special tokens alone: the job's parameters say how it
    generates, as they do on vLLM, not defaults of the folder's (a repetition penalty, say)."""
    from transformers import GenerationConfig  # noqa: PLC0415 (a slot's library, loaded with the model)

    names = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
    return GenerationConfig(**{name: getattr(settings, name) for name in names})


def completion_text(tokenizer, prompt: list[int], tokens: list[int]) -> str:
    """The generated tokens' text as it follows the prompt's: decoded after it, so that a tokenizer that
    drops a text's first space (SentencePiece's) keeps the one between prompt and completion, as vLLM does."""
    before = tokenizer.decode(prompt, skip_special_tokens=True)
    after = tokenizer.decode(prompt + tokens, skip_special_tokens=True)
    return after[len(before) :] if after.startswith(before) else tokenizer.decode(tokens, skip_special_tokens=True)


def by_length(texts: list[str], size: int) -> list[list[int]]:
    """The texts' indexes in model batches of `size`, shortest first: a batch pads to its longest."""
    order = sorted(range(len(texts)), key=lambda index: len(texts[index]))
    return [order[start : start + size] for start in range(0, len(order), size)]


def pipelined(chunks: list, prepare: Callable, run: Callable) -> Iterator:
    """run(prepare(chunk)) for each chunk in turn, the next chunk prepared in a thread meanwhile."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(prepare, chunks[0]) if chunks else None
        for index in range(len(chunks)):
            ready = pending.result()
            if index + 1 < len(chunks):
                pending = pool.submit(prepare, chunks[index + 1])
            yield run(ready)


def max_length(tokenizer, config, offset: int = 0) -> int:
    """The longest sequence the model takes (for generate, the prompt and what is generated): the
    tokenizer's limit, within the model's positions (its config's, less the `offset` its first token's
    position starts at; a model that also reads images gives them in its text config)."""
    config = config.get_text_config()
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", 512)
    return min(tokenizer.model_max_length, positions - offset)


def position_offset(network) -> int:
    """Where the model's positions start: RoBERTa and its kin number tokens from their padding index + 1
    (the table's padding row), so that 514 positions take 512 tokens; 0 for the others."""
    table = getattr(getattr(network.base_model, "embeddings", None), "position_embeddings", None)
    padding = getattr(table, "padding_idx", None)
    return 0 if padding is None else padding + 1


class PartnerModel(Processor):
    """What the three kinds share: the model checked on submit and staging, and the text of each record."""

    task = ""
    version = "1"
    input_formats = ("csv", "jsonl", "parquet")
    batch_size = 256  # records between two renewals of the shard's lease
    gpu_batch_size = 4096  # as many as an auto batch may be: a GPU's batches are not cut at 256
    grain = 32
    requires = ("torch", "transformers")
    model_file = MODEL_FILE

    def check_model(self, path: str) -> dict:
        return check_hf_model(path, self.task)

    def validate_params(self, raw):
        params = super().validate_params(raw)
        return {**params, "batch_size": _batch_size(params["batch_size"])}

    def warm(self) -> None:
        super().warm()
        # transformers loads its classes when first asked for them: the auto classes and the tokenizers'.
        import transformers  # noqa: PLC0415

        for name in ("AutoModel", "AutoModelForSequenceClassification", "AutoModelForCausalLM", "AutoTokenizer"):
            getattr(transformers, name)

    def prepare(self, plan: dict, layout: dict, params: dict, model: str) -> dict:
        return {**plan, "model": check_hf_model(local_model(model), self.task)}

    def encoded(self, texts: list[str], context: Context, run: Callable) -> list:
        """run(the model's inputs) over the texts in batches sorted by length; the results in text order."""
        tokenizer, network = load(context.model, context.device, self.task)
        limit = max_length(tokenizer, network.config, position_offset(network))
        limit = min(limit, context.plan.get("model", {}).get("max_length", limit))

        def tokenize(chunk: list[int]):
            batch = tokenizer([texts[index] for index in chunk], padding=True, truncation=True, max_length=limit)
            return chunk, batch.convert_to_tensors("pt").to(context.device)

        found: list = [None] * len(texts)
        chunks = by_length(texts, batch_size(context.params, network, limit))
        for chunk, rows in pipelined(chunks, tokenize, lambda ready: (ready[0], run(network, ready[1]))):
            for index, row in zip(chunk, rows, strict=True):
                found[index] = row
        return found


class Embed(PartnerModel):
    name = "embed"
    title = "Embed with your model"
    description = (
        "A vector for the text of every record from your Hugging Face encoder (sentence-transformers or plain "
        "transformers): its pooling and normalisation, or those you choose. Output: Parquet, one float32 or "
        "float16 vector per record, as wide as the model."
    )
    task = "encoder"
    params = (
        Param("column", str, "text", "The column holding the text to embed."),
        Param(
            "pooling", str, "auto", "auto (the model's own, else mean), mean, cls or last: how tokens make one vector."
        ),
        Param("normalise", str, "auto", "auto (as the model says, else no), yes or no: vectors of unit length."),
        Param("dtype", str, "float32", "float32 or float16: the vectors' type in the output."),
        BATCH_SIZE,
    )

    def validate_params(self, raw):
        params = super().validate_params(raw)
        return {**params, **{name: _choice(params, name) for name in ("pooling", "normalise", "dtype")}}

    def prepare(self, plan: dict, layout: dict, params: dict, model: str) -> dict:
        plan = {**super().prepare(plan, layout, params, model), **text_column(self.name, layout, params)}
        facts = plan["model"]
        pooling = facts.get("pooling", "mean") if params["pooling"] == "auto" else params["pooling"]
        normalise = facts.get("normalize", False) if params["normalise"] == "auto" else params["normalise"] == "yes"
        return {**plan, "pooling": pooling, "normalise": normalise, "dimension": facts["hidden_size"]}

    def output_schema(self, context: Context) -> pa.Schema:
        kind = pa.float16() if context.params["dtype"] == "float16" else pa.float32()
        return pa.schema([("embedding", pa.list_(kind, context.plan["dimension"]))])

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        texts, kept, rejects = texts_of(records, context.plan)
        schema = self.output_schema(context)
        if not texts:
            return Batch(table=schema.empty_table(), kept=kept, rejects=rejects)
        pooling, normalise = context.plan["pooling"], context.plan["normalise"]
        texts = as_encoded(texts, context.plan["model"])
        vectors = np.stack(
            self.encoded(texts, context, lambda network, inputs: pool(network, inputs, pooling, normalise))
        )
        vectors = vectors.astype(schema.field("embedding").type.value_type.to_pandas_dtype())
        vectors, kept = numbers_only(vectors, kept, records, rejects, "a vector")
        column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), context.plan["dimension"])
        return Batch(table=pa.table([column], schema=schema), kept=kept, rejects=rejects)


def as_encoded(texts: list[str], facts: dict) -> list[str]:
    """The texts as sentence-transformers encodes them with the folder's settings: after its default
    prompt, and lowercased where its encoder says so."""
    prompt = facts.get("prompt", "")
    return [(prompt + text).lower() if facts.get("lowercase") else prompt + text for text in texts]


def numbers_only(values: np.ndarray, kept: list[int], records: list[Record], rejects: list, what: str):
    """The rows of `values` (one a kept record) that are numbers throughout, and their records' positions;
    each other record rejected with why. A model whose weights hold NaN, or one run in float16 past its
    range, gives such rows, and they are nobody's output."""
    fine = np.isfinite(values.reshape(len(values), -1)).all(axis=1)
    if fine.all():
        return values, kept
    by_position = {record.position: record for record in records}
    for position, number in zip(kept, fine, strict=True):
        if not number:
            rejects.append((by_position[position], f"the model gave {what} that is not a number (NaN or infinite)"))
    return values[fine], [position for position, number in zip(kept, fine, strict=True) if number]


def pool(network, inputs, pooling: str, normalise: bool) -> np.ndarray:
    """One float32 vector per text of the batch: its tokens' states pooled, of unit length if asked."""
    import torch  # noqa: PLC0415 (a slot's library, loaded with the model)

    with torch.inference_mode():
        states = network(**inputs).last_hidden_state.float()
        mask = inputs["attention_mask"].unsqueeze(-1).to(states.dtype)
        if pooling == "cls":
            vectors = states[:, 0]
        elif pooling == "last":
            last = inputs["attention_mask"].sum(dim=1) - 1
            vectors = states[torch.arange(states.shape[0], device=states.device), last]
        else:
            vectors = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        if normalise:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
    return vectors.cpu().numpy()


class Classify(PartnerModel):
    name = "classify"
    title = "Classify with your model"
    description = (
        "Your Hugging Face sequence-classification model over the text of every record. Output: Parquet with "
        "each record's label and its score, and optionally every label's score: probabilities over the labels, "
        "each label's own for a multi-label model or one of a single output (a reranker's), the value itself "
        "for a regression model."
    )
    task = "classify"
    params = (
        Param("column", str, "text", "The column holding the text to classify."),
        Param("all_scores", str, "no", "yes to add every label's score, in the order of the plan's labels."),
        BATCH_SIZE,
    )

    def validate_params(self, raw):
        params = super().validate_params(raw)
        return {**params, "all_scores": _choice(params, "all_scores")}

    def prepare(self, plan: dict, layout: dict, params: dict, model: str) -> dict:
        plan = {**super().prepare(plan, layout, params, model), **text_column(self.name, layout, params)}
        return {**plan, "labels": plan["model"]["labels"]}

    def output_schema(self, context: Context) -> pa.Schema:
        fields = [("label", pa.string()), ("score", pa.float32())]
        if context.params["all_scores"] == "yes":
            fields.append(("scores", pa.list_(pa.float32(), len(context.plan["labels"]))))
        return pa.schema(fields)

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        texts, kept, rejects = texts_of(records, context.plan)
        schema = self.output_schema(context)
        if not texts:
            return Batch(table=schema.empty_table(), kept=kept, rejects=rejects)
        scores = np.stack(self.encoded(texts, context, probabilities))
        scores, kept = numbers_only(scores, kept, records, rejects, "scores")
        labels = context.plan["labels"]
        best = scores.argmax(axis=1)
        columns = [pa.array([labels[index] for index in best]), pa.array(scores.max(axis=1), pa.float32())]
        if "scores" in schema.names:
            columns.append(pa.FixedSizeListArray.from_arrays(pa.array(scores.reshape(-1), pa.float32()), len(labels)))
        return Batch(table=pa.table(columns, schema=schema), kept=kept, rejects=rejects)


def probabilities(network, inputs) -> np.ndarray:
    """Each label's score, as transformers' text-classification pipeline gives it: a softmax over the
    labels; each label on its own (a sigmoid) for a multi-label model or one of a single output (a
    reranker's relevance, a reward); the value itself for a regression model."""
    import torch  # noqa: PLC0415 (a slot's library, loaded with the model)

    with torch.inference_mode():
        logits = network(**inputs).logits.float()
    config = network.config
    if config.problem_type == "regression":
        return logits.cpu().numpy()
    alone = config.problem_type == "multi_label_classification" or logits.shape[-1] == 1
    return (torch.sigmoid(logits) if alone else torch.softmax(logits, dim=-1)).cpu().numpy()


def template_fields(template: str) -> list[str]:
    """The column names a prompt template reads, each as {column}; ParamError for anything else."""
    braces = "write {{ and }} for a brace of its own"
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ParamError(f"template is not a template: {error}; {braces}") from None
    fields = [name for _, name, _, _ in parts if name is not None]
    for _, name, spec, conversion in parts:
        if name is not None and (not name or spec or conversion or "." in name or "[" in name):
            written = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise ParamError(f"template fields are {{column}}, a column's name alone, not {written}; {braces}")
    if not fields:
        raise ParamError("template names no column: write it with {column} where a record's value goes")
    return fields


class Generate(PartnerModel):
    name = "generate"
    title = "Generate with your model"
    description = (
        "Your causal language model completes a prompt made from every record's columns. Output: Parquet with "
        "the text, the prompt's and the output's token counts, and why it stopped (stop or length)."
    )
    task = "generate"
    params = (
        Param("template", str, "{text}", "The prompt, with {column} where each record's value goes."),
        Param("max_new_tokens", int, 64, "The most tokens generated per record.", minimum=1, maximum=8192),
        Param("temperature", float, 0.0, "0 for greedy decoding; higher samples more freely.", minimum=0, maximum=5),
        Param("top_p", float, 1.0, "Samples from the smallest set of tokens this likely.", minimum=0.01, maximum=1),
        Param("seed", int, 0, "The same seed gives the same output for the same record.", minimum=0, maximum=2**31),
        BATCH_SIZE,
    )
    batch_size = 64
    gpu_batch_size = 1024  # vLLM keeps hundreds of sequences going at once, transformers batches them
    grain = 16
    schema = pa.schema(
        [
            ("text", pa.string()),
            ("prompt_tokens", pa.int32()),
            ("output_tokens", pa.int32()),
            ("finish_reason", pa.string()),
        ]
    )

    def validate_params(self, raw):
        params = super().validate_params(raw)
        template_fields(params["template"])
        return params

    def prepare(self, plan: dict, layout: dict, params: dict, model: str) -> dict:
        plan = super().prepare(plan, layout, params, model)
        columns = layout["columns"]
        found = {}
        for name in template_fields(params["template"]):
            column = data_column(name, columns)
            if column is None:
                raise ParamError(
                    f"the template reads the column {name!r}, which the data does not have; "
                    f"its columns are: {', '.join(columns) or 'none'}"
                )
            found[name] = [column, columns.index(column)]
        return {**plan, "fields": found}

    def output_schema(self, context: Context) -> pa.Schema:
        return self.schema

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        written, rejects = [], []
        for record in records:
            try:
                written.append((record, self.prompt(record, context)))
            except ValueError as error:
                rejects.append((record, str(error)))
        if not written:
            return Batch(table=self.schema.empty_table(), kept=[], rejects=rejects)
        engine = Engine.of(context)
        prompts, tokens, kept = [], [], []
        for (record, prompt), ids in zip(written, engine.token_ids([prompt for _, prompt in written]), strict=True):
            if reason := too_long(len(ids) if prompt.strip() else 0, engine.limit):
                rejects.append((record, reason))
                continue
            prompts.append(prompt)
            tokens.append(ids)
            kept.append(record.position)
        if not prompts:
            return Batch(table=self.schema.empty_table(), kept=kept, rejects=rejects)
        rows = engine.generate(prompts, tokens, kept, context.params)
        table = pa.Table.from_pylist(rows, schema=self.schema)
        return Batch(table=table, kept=kept, rejects=rejects)

    @staticmethod
    def prompt(record: Record, context: Context) -> str:
        values = {}
        for name, (column, index) in context.plan["fields"].items():
            value = text_of(record.value, column, index)
            if value is None:
                raise ValueError(f"column {column!r} is missing or null")
            values[name] = value if isinstance(value, str) else str(value)
        parts = string.Formatter().parse(context.params["template"])
        return "".join(literal + (values[name] if name is not None else "") for literal, name, _, _ in parts)


def too_long(count: int, limit: int) -> str | None:
    """Why a prompt of `count` tokens (0 for one of blanks alone, whatever start token the tokenizer adds)
    cannot be completed by a model that takes `limit`, or None."""
    if count == 0:
        return "the prompt is empty: there is nothing to complete"
    if count >= limit:
        return f"the prompt is {count} tokens; the model takes {limit} at most, with at least one generated"
    return None


class Engine:
    """What generates: vLLM where a GPU slot has it, else transformers. Each record is given as many new
    tokens as asked for, or as fit the model's length after its prompt (then it stops for length)."""

    limit: int  # the longest sequence the model takes, its prompt and what is generated

    @staticmethod
    def of(context: Context) -> "Engine":
        if context.device == "cuda" and importlib.util.find_spec("vllm") is not None:
            return kept(("vllm", context.model), lambda: VllmEngine(context.model))
        return TransformersEngine(context.model, context.device)

    def token_ids(self, prompts: list[str]) -> list[list[int]]:
        """Each prompt's tokens, as the model reads it: tokenized once, to count and to run."""
        return self.tokenizer(prompts, verbose=False)["input_ids"] if prompts else []

    def room(self, count: int, params: dict) -> int:
        return min(params["max_new_tokens"], self.limit - count)


class TransformersEngine(Engine):
    def __init__(self, model: str, device: str):
        self.tokenizer, self.network = load(model, device, "generate")
        self.limit = max_length(self.tokenizer, self.network.config, position_offset(self.network))
        self.device = device

    def generate(self, prompts: list[str], tokens: list[list[int]], positions: list[int], params: dict) -> list[dict]:
        """One row per prompt (`tokens`: its token ids). Greedy decoding runs the prompts that have room for
        every new token asked for in batches sorted by length, each other prompt alone with the room it has;
        sampling runs each prompt alone from its own seed, so that its output does not depend on its batch."""
        counts = [len(ids) for ids in tokens]
        rooms = [self.room(count, params) for count in counts]
        if params["temperature"] == 0:
            roomy = [index for index, room in enumerate(rooms) if room == params["max_new_tokens"]]
            longest = reach([counts[i] for i in roomy], params["max_new_tokens"], self.limit) if roomy else 1
            size = batch_size(params, self.network, longest)
            chunks = [[roomy[at] for at in chunk] for chunk in by_length([prompts[i] for i in roomy], size)]
            chunks += [[index] for index, room in enumerate(rooms) if room < params["max_new_tokens"]]
        else:
            chunks = [[index] for index in range(len(prompts))]
        rows: list = [None] * len(prompts)
        for chunk in chunks:
            seed = params["seed"] + positions[chunk[0]]
            room = min(rooms[index] for index in chunk)
            for index, row in zip(chunk, self._generate([tokens[i] for i in chunk], params, room, seed), strict=True):
                rows[index] = row
        return rows

    def _generate(self, tokens: list[list[int]], params: dict, room: int, seed: int) -> list[dict]:
        """transformers' generate over one batch of prompts' token ids, padded on the left."""
        import torch  # noqa: PLC0415 (a slot's library, loaded with the model)

        tokenizer, network = self.tokenizer, self.network
        inputs = tokenizer.pad({"input_ids": tokens}, padding=True, return_tensors="pt").to(self.device)
        stops = network.generation_config.eos_token_id
        stops = set(stops if isinstance(stops, list) else [stops if stops is not None else tokenizer.eos_token_id])
        sampling = {"do_sample": False}
        if params["temperature"] > 0:
            sampling = {"do_sample": True, "temperature": params["temperature"], "top_p": params["top_p"], "top_k": 0}
        torch.manual_seed(seed)
        with torch.inference_mode():
            output = network.generate(**inputs, max_new_tokens=room, pad_token_id=tokenizer.pad_token_id, **sampling)
        rows = []
        for prompt, new in zip(tokens, output[:, inputs["input_ids"].shape[1] :].tolist(), strict=True):
            stop = next((index for index, token in enumerate(new) if token in stops), None)
            kept = new if stop is None else new[: stop + 1]
            rows.append(
                {
                    "text": completion_text(tokenizer, prompt, kept),
                    "prompt_tokens": len(prompt),
                    "output_tokens": len(kept),
                    "finish_reason": "length" if stop is None else "stop",
                }
            )
        return rows


class VllmEngine(Engine):
    """vLLM's offline batch generation (continuous batching, paged KV cache) on the slot's GPU. An engine
    in its process's keeps the GPU's memory once made (vllm-project/vllm#21073): the next model takes a
    fresh process."""

    lets_go = False

    def __init__(self, model: str):
        # vLLM is installed only on GPU machines that want it; imported only where it runs. Its engine runs
        # in this process: a slot is a Celery pool process, which multiprocessing forbids to start children.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from transformers import AutoConfig  # noqa: PLC0415
        from vllm import LLM  # noqa: PLC0415

        folder = unpacked(local_model(model)).name
        self.tokenizer = _tokenizer(model, "generate")
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        self.limit = max_length(self.tokenizer, config)
        self.llm = LLM(
            model=folder, trust_remote_code=False, dtype="auto", load_format="safetensors", max_model_len=self.limit
        )

    def generate(self, prompts: list[str], tokens: list[list[int]], positions: list[int], params: dict) -> list[dict]:
        """Every prompt at once, each with its own seed (the seed and its position) and room."""
        from vllm import SamplingParams  # noqa: PLC0415 (installed only where it runs)

        sampling = [
            SamplingParams(
                max_tokens=self.room(len(ids), params),
                temperature=params["temperature"],
                top_p=params["top_p"],
                seed=params["seed"] + position,
            )
            for ids, position in zip(tokens, positions, strict=True)
        ]
        rows = []
        for result in self.llm.generate(prompts, sampling, use_tqdm=False):
            completion = result.outputs[0]
            rows.append(
                {
                    "text": completion.text,
                    "prompt_tokens": len(result.prompt_token_ids),
                    "output_tokens": len(completion.token_ids),
                    "finish_reason": "stop" if completion.finish_reason == "stop" else "length",
                }
            )
        return rows
