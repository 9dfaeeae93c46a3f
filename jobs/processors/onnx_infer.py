"""onnx-infer: the partner's ONNX model, run over every row of a table with onnxruntime.

The model comes with the job (a .onnx file). When the job is submitted it must load, and each of its
inputs and outputs must be a tensor of a type read here (float, double, int32, int64, bool, string)
of shape [N] or [N, k], N the batch. Each input takes its values from the column of the same name,
or from the columns the `inputs` parameter maps to it: `features=a+b+c` feeds an input of shape
[N, 3] with columns a, b and c of each record. Staging checks that those columns are in the data,
so a wrong mapping fails the job before any GPU is held. A record whose value does not convert to
its input's type is rejected, the column and value named. Output: the record id, then one column per
model output: a value, or a fixed-size list for an output of shape [N, k]. On a GPU slot the CUDA
provider runs the model (onnxruntime-gpu, from requirements-gpu.txt); on a CPU slot, onnxruntime's
own, with no more threads than the slot's share of the cores.
"""

import atexit
import contextlib
import math
import os
import tempfile
from collections import OrderedDict
from functools import lru_cache

import numpy as np
import pyarrow as pa
from django.core.files.storage import default_storage

from jobs.processors.base import Batch, Context, Param, ParamError, Processor, Record, data_column

# ONNX tensor element types this reads: the numpy dtype a batch is built in, the Arrow type output.
TYPES = {
    "tensor(float)": ("float32", pa.float32()),
    "tensor(double)": ("float64", pa.float64()),
    "tensor(int32)": ("int32", pa.int32()),
    "tensor(int64)": ("int64", pa.int64()),
    "tensor(bool)": ("bool", pa.bool_()),
    "tensor(string)": ("object", pa.string()),
}
TRUE, FALSE = frozenset(("true", "1", "yes")), frozenset(("false", "0", "no"))


def parse_inputs(text: str) -> dict[str, list[str]]:
    """The `inputs` parameter, `input=column+column,input=column`, as a mapping."""
    mapping: dict[str, list[str]] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, columns = entry.partition("=")
        names = [column.strip() for column in columns.split("+")]
        if not sep or not name.strip() or not all(names):
            raise ParamError(f"inputs entry {entry!r} must be input=column or input=column+column+…")
        mapping[name.strip()] = names
    return mapping


def _session(path: str, device: str = "cpu"):
    # Only a slot runs a model: the web processes never load the runtime.
    import onnxruntime as ort  # noqa: PLC0415

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS") or 0)  # the slot's share; 0: all
    options.log_severity_level = 3
    providers = ["CPUExecutionProvider"]
    if device == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(path, options, providers=providers)


def _width(name: str, shape: list, what: str) -> int | None:
    """Values per record of a tensor shaped [N] or [N, k]; None when k is not fixed."""
    if len(shape) not in (1, 2):
        raise ParamError(f"the model's {what} {name!r} has shape {shape}: only [N] or [N, k] is read")
    if isinstance(shape[0], int) and shape[0] != 1:
        raise ParamError(
            f"the model's {what} {name!r} takes batches of exactly {shape[0]}: export it with a dynamic batch dimension"
        )
    if len(shape) == 1:
        return 1
    return shape[1] if isinstance(shape[1], int) else None


def describe(path: str) -> dict:
    """The model's inputs and outputs; ParamError when it does not load or has a part not read here."""
    try:
        session = _session(path)
    except Exception as error:  # onnxruntime raises its own exception types for a bad file
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ParamError(f"the model does not load: {first[:300]}") from None
    found = {}
    for what, nodes in (("input", session.get_inputs()), ("output", session.get_outputs())):
        found[what + "s"] = []
        for node in nodes:
            if node.type not in TYPES:
                kinds = ", ".join(kind[7:-1] for kind in TYPES)
                raise ParamError(
                    f"the model's {what} {node.name!r} is {node.type}: only tensors of {kinds} are read"
                    + (" (export a classifier without ZipMap)" if what == "output" else "")
                )
            width = _width(node.name, node.shape, what)
            found[what + "s"].append({"name": node.name, "type": node.type, "rank": len(node.shape), "width": width})
    return found


class _ModelCopies:
    """Local copies of models that storage keeps on S3, for onnxruntime to open: the last few a process
    used, each deleted when it drops out and when the process exits (a slot runs job after job, each
    with a model of its own, up to E31_MAX_MODEL_BYTES)."""

    KEEP = 4

    def __init__(self):
        self.copies: OrderedDict[str, str] = OrderedDict()
        atexit.register(self.clear)

    def get(self, path: str) -> str:
        if path in self.copies:
            self.copies.move_to_end(path)
            return self.copies[path]
        handle, local = tempfile.mkstemp(prefix="e31-model-")
        try:
            with os.fdopen(handle, "wb") as target, default_storage.open(path, "rb") as source:
                while block := source.read(8 * 1024 * 1024):
                    target.write(block)
        except BaseException:
            os.unlink(local)
            raise
        self.copies[path] = local
        while len(self.copies) > self.KEEP:
            _, dropped = self.copies.popitem(last=False)
            _remove(dropped)
        return local

    def clear(self) -> None:
        while self.copies:
            _remove(self.copies.popitem()[1])


def _remove(local: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(local)  # a session already made from it keeps the model it read


_copies = _ModelCopies()


def local_model(path: str) -> str:
    """The model as a file on this machine: where the storage keeps it, or a copy (S3)."""
    try:
        return default_storage.path(path)
    except NotImplementedError:
        return _copies.get(path)


@lru_cache(maxsize=2)
def _loaded(path: str, device: str):
    """The model's session, kept for the next batches of the same job (a slot runs one job at a time)."""
    return _session(local_model(path), device)


def _convert(value, dtype: str):
    """One value in the input's type; ValueError says why it cannot be."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError("is empty")
    if dtype == "object":
        return str(value)
    text = value.strip().lower() if isinstance(value, str) else value
    if dtype == "bool":
        if isinstance(value, bool) or text in TRUE | FALSE:
            return value if isinstance(value, bool) else text in TRUE
        raise ValueError("is not a bool")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("is not a number")
    if dtype.startswith("int"):
        try:
            number = int(text) if isinstance(text, str) else int(text) if float(text).is_integer() else None
        except (ValueError, OverflowError):
            number = None
        if number is None:
            raise ValueError("is not an integer")
        limit = 2 ** (int(dtype[3:]) - 1)
        if not -limit <= number < limit:
            raise ValueError(f"is out of range for {dtype}")
        return number
    try:
        number = float(text)
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(number):
        raise ValueError("is not a finite number")
    return number


class OnnxInfer(Processor):
    name = "onnx-infer"
    title = "Run an ONNX model"
    description = "Your ONNX model over every row of a table (CSV, JSONL or Parquet); its outputs per record."
    version = "1"
    input_formats = ("csv", "jsonl", "parquet")
    params = (
        Param(
            "inputs",
            str,
            "",
            "Columns for each model input, as input=column or input=col1+col2+… for an input of shape "
            "[N, k]; an input not named takes the column of its own name.",
        ),
    )
    batch_size = 1024
    model_file = "an ONNX model (.onnx)"

    def validate_params(self, raw):
        params = super().validate_params(raw)
        parse_inputs(params["inputs"])
        return params

    def check_model(self, path: str) -> dict:
        return describe(path)

    def prepare(self, plan: dict, layout: dict, params: dict, model: str) -> dict:
        """Each model input's columns, checked against the data's, and the outputs: before any GPU is held."""
        found = describe(local_model(model))
        mapping = parse_inputs(params["inputs"])
        names = [node["name"] for node in found["inputs"]]
        unknown = sorted(set(mapping) - set(names))
        if unknown:
            raise ParamError(
                f"inputs names {unknown[0]!r}, which the model does not take (it takes: {', '.join(names)})"
            )
        available = layout["columns"]
        specs = []
        for node in found["inputs"]:
            named = mapping.get(node["name"], [node["name"]])
            columns = [data_column(name, available) for name in named]
            missing = [name for name, column in zip(named, columns, strict=True) if column is None]
            if missing:
                raise ParamError(
                    f"the model's input {node['name']!r} reads column {missing[0]!r}, which the data does not have "
                    f"(its columns: {', '.join(available)}); map it with inputs={node['name']}=column"
                )
            if node["width"] is not None and len(columns) != node["width"]:
                raise ParamError(
                    f"the model's input {node['name']!r} takes {node['width']} values per record, "
                    f"not the {len(columns)} of {'+'.join(columns)}: map it with inputs={node['name']}=col1+col2+…"
                )
            specs.append({**node, "columns": columns, "dtype": TYPES[node["type"]][0]})
        return {**plan, "inputs": specs, "outputs": found["outputs"]}

    def output_schema(self, context: Context) -> pa.Schema:
        fields = []
        for output in context.plan["outputs"]:
            kind = TYPES[output["type"]][1]
            width = output["width"]
            fields.append(pa.field(output["name"], kind if width == 1 else pa.list_(kind, width or -1)))
        return pa.schema(fields)

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        columns = {name: index for index, name in enumerate(context.layout["columns"])}
        inputs = context.plan["inputs"]
        rows, kept, rejects = {spec["name"]: [] for spec in inputs}, [], []
        for record in records:
            try:
                values = {
                    spec["name"]: [self._value(record, column, columns, spec["dtype"]) for column in spec["columns"]]
                    for spec in inputs
                }
            except ValueError as error:
                rejects.append((record, str(error)))
                continue
            for name, found in values.items():
                rows[name].append(found)
            kept.append(record.position)
        schema = self.output_schema(context)
        if not kept:
            return Batch(table=schema.empty_table(), kept=[], rejects=rejects)
        feed = {}
        for spec in inputs:
            array = np.array(rows[spec["name"]], dtype=spec["dtype"])
            feed[spec["name"]] = array[:, 0] if spec["rank"] == 1 else array
        session = _loaded(context.model, context.device)
        results = session.run([output["name"] for output in context.plan["outputs"]], feed)
        arrays = []
        for field, result in zip(schema, results, strict=True):
            if len(result) != len(kept):
                raise RuntimeError(f"the model gave {len(result)} rows of {field.name!r} for {len(kept)} records")
            values = result.tolist() if result.ndim > 1 else list(result.reshape(-1).tolist())
            arrays.append(pa.array(values, type=field.type))
        return Batch(table=pa.Table.from_arrays(arrays, schema=schema), kept=kept, rejects=rejects)

    @staticmethod
    def _value(record: Record, column: str, columns: dict, dtype: str):
        raw = record.value[columns[column]] if isinstance(record.value, list) else record.value.get(column)
        try:
            return _convert(raw, dtype)
        except ValueError as error:
            raise ValueError(f"column {column!r}: {raw!r} {error}") from None
