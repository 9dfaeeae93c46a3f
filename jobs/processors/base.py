"""The processor interface: what a work kind declares and the batch function a slot calls."""

import importlib.util
import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from portal.text import ascii_count, ascii_decimal

# A number parameter given as text is read as ASCII digits only, as every number a partner types is.
NUMBERS = {int: ascii_count, float: ascii_decimal}


class Record(NamedTuple):
    """One record as a processor gets it: its input position, the line it starts on, its value (None
    when it could not be read, and `error` says why), its byte range and the line it ends on."""

    position: int
    line: int
    value: list | dict | None
    error: str | None
    start: int
    end: int
    end_line: int


class ParamError(ValueError):
    """A work parameter the user gave is not acceptable; the message names it."""


class ProcessSpent(Exception):
    """This process cannot run the batch, but a fresh one can: it holds a model it cannot let go of. The
    slot gives the shard back, uncounted, and a new process takes the hold over."""


def spent(error: BaseException) -> bool:
    """Whether the error leaves this process unable to run any more work: a CUDA error (a device-side
    assert, an illegal memory access) stays with the process's CUDA context, and every later call on it
    fails. Running out of GPU memory is not one."""
    return "CUDA error" in str(error) or type(error).__name__ == "AcceleratorError"


def data_column(name: str, columns: Sequence[str]) -> str | None:
    """The data's own spelling of the column a parameter names, or None when it has no such column.

    Names are compared in NFC: a parameter is typed composed (its field cleans it to NFC) while a header
    keeps its bytes, so "café" finds a header written "cafe" + U+0301, and the reverse. The same spelling wins."""
    if name in columns:
        return name
    wanted = unicodedata.normalize("NFC", name)
    return next((column for column in columns if unicodedata.normalize("NFC", column) == wanted), None)


@dataclass(frozen=True)
class Param:
    name: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None

    @property
    def label(self) -> str:
        """The parameter in words, as the job form shows it: type_threshold is "Type threshold"."""
        return self.name.replace("_", " ").replace("-", " ").capitalize()

    def parse(self, raw: Any) -> Any:
        if raw is None or raw == "":
            return self.default
        given = raw
        if isinstance(raw, str) and self.kind in NUMBERS:
            given = NUMBERS[self.kind](raw.strip(), signed=True)  # None for Arabic-Indic digits, "1e3" or "inf"
        try:
            value = self.kind(given)
        except (TypeError, ValueError):
            raise ParamError(f"{self.name} must be a {self.kind.__name__}, not {raw!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ParamError(f"{self.name} must be a finite number, not {raw!r}")
        if self.minimum is not None and value < self.minimum:
            raise ParamError(f"{self.name} must be at least {self.minimum}, not {value}")
        if self.maximum is not None and value > self.maximum:
            raise ParamError(f"{self.name} must be at most {self.maximum}, not {value}")
        return value


@dataclass(frozen=True)
class Context:
    """What a batch needs besides its records: the job's parameters, staging's plan, the device."""

    params: dict
    plan: dict
    layout: dict
    device: str = "cpu"
    slot: int | None = None  # the index of the GPU (or CPU slot) on its machine, None outside a pass
    model: str = ""  # the job's model file in storage, for a work kind that takes one


@dataclass
class Batch:
    """A processed batch: one output row per kept record (for a reducing processor, a partial summary
    of the kept records), and a reason for each rejected one."""

    table: pa.Table
    kept: list[int] = field(default_factory=list)
    rejects: list[tuple[Record, str]] = field(default_factory=list)


class Scanner:
    """Sees every readable record while staging and returns the processor's plan for the pass."""

    def add(self, value: list | dict) -> None:
        raise NotImplementedError

    def plan(self, columns: list[str]) -> dict:
        raise NotImplementedError


class Processor:
    name: str = ""
    title: str = ""
    description: str = ""
    version: str = "1"
    input_formats: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    batch_size: int = 5000
    # Records a GPU slot hands run_batch at once, where more than batch_size keep a GPU busy (a model's
    # batches of thousands, vLLM's continuous batching); None: batch_size on every slot.
    gpu_batch_size: int | None = None
    # Records between the points where staging may cut the data, and the fewest a shard holds. Work that
    # takes a second or more per hundred records (a model's) cuts finer, so a small dataset still gives
    # every slot shards of its own and the slots end together.
    grain: int = 250
    # A reduction: each batch's table is a partial summary of its kept records (rows of
    # `output_schema`, no record positions) and `merge` makes the output of them all at assembly.
    reduces: bool = False
    # Whether finish_output writes output.parquet again (assembly then reads it again for its digest).
    rewrites_output: bool = False
    # Modules the work needs beyond requirements.txt (a GPU worker's requirements-gpu.txt brings them).
    requires: tuple[str, ...] = ()

    # What file the work needs with the job besides the data, e.g. "an ONNX model (.onnx)"; "" for none.
    model_file: str = ""

    def check_model(self, path: str) -> dict:
        """Check the model file at `path` when the job is submitted; ParamError says what is wrong."""
        raise NotImplementedError

    def prepare(self, plan: dict, layout: dict, params: dict, model: str) -> dict:
        """At the end of staging, with the data described: the plan the slots work from. ParamError
        fails the job here, before any GPU is held. The plan as the scanner made it by default."""
        return plan

    def warm(self) -> None:
        """Once in a slot's worker, before it counts online: import what the work runs on, so that no hold
        pays for it (torch alone takes seconds)."""
        for name in self.requires:
            importlib.import_module(name)

    def missing(self) -> list[str]:
        """The required modules this machine lacks: found, not imported, so asking costs no import of torch."""
        return [name for name in self.requires if importlib.util.find_spec(name) is None]

    def validate_params(self, raw: Mapping[str, Any]) -> dict:
        for name in sorted(set(raw) - {param.name for param in self.params}):
            self.parse_param(name, raw[name])  # refuses the first name the work does not take
        return {param.name: param.parse(raw.get(param.name)) for param in self.params}

    def parse_param(self, name: str, raw: Any) -> Any:
        """One parameter read on its own, so that each one refused can be said (validate_params reads them
        together, and may refuse a combination); ParamError for a name the work does not take, or its value."""
        known = {param.name: param for param in self.params}
        if name not in known:
            raise ParamError(f"{self.name} has no parameter {name!r} (it takes: {', '.join(known) or 'none'})")
        return known[name].parse(raw)

    def scanner(self, params: dict) -> Scanner | None:
        return None

    def output_schema(self, context: Context) -> pa.Schema:
        raise NotImplementedError

    def records_per_batch(self, device: str) -> int:
        """The records a slot on `device` ("cpu" or "cuda") hands run_batch at once."""
        return (self.gpu_batch_size or self.batch_size) if device == "cuda" else self.batch_size

    def process_batch(self, records: list[Record], context: Context) -> Batch:
        """The batch's readable records (never none) processed: each one kept or rejected."""
        raise NotImplementedError

    def run_batch(self, records: list[Record], context: Context) -> Batch:
        """A batch as a slot reads it, unreadable records included: those rejected with their error,
        the rest processed; checked to keep or reject every record once, its table in the output
        schema. A batch with nothing left to keep (all unreadable, all rejected) is a valid one."""
        schema = self.output_schema(context)
        readable = [record for record in records if record.error is None]
        unreadable = [(record, record.error) for record in records if record.error is not None]
        result = self.process_batch(readable, context) if readable else Batch(table=schema.empty_table())
        accounted = sorted([*result.kept, *(record.position for record, _ in result.rejects)])
        if accounted != sorted(record.position for record in readable):
            raise RuntimeError(f"{self.name} lost records: every record must be kept or rejected, once")
        if not self.reduces and result.table.num_rows != len(result.kept):
            raise RuntimeError(f"{self.name} gave {result.table.num_rows} rows for {len(result.kept)} records kept")
        return Batch(table=_conform(result.table, schema), kept=result.kept, rejects=unreadable + result.rejects)

    def merge(self, partials: Iterable[pa.Table], context: Context) -> pa.Table:
        """A reducing processor's output from the partial summaries of every batch, in input order."""
        raise NotImplementedError

    def finish_output(self, output_path: str, scratch: str) -> list[str]:
        """Once output.parquet is assembled at `output_path`: write any further output files into
        `scratch` (and rewrite output.parquet if need be); their paths. None by default."""
        return []


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table in the output schema: an empty one built from no values has columns of no type."""
    if table.schema == schema:
        return table
    if not table.num_rows:
        return schema.empty_table()
    return table.select(schema.names).cast(schema)
