"""Work kinds. Each is a Processor registered here by name; third parties register through the
entry-point group `e31.processors`."""

from functools import cache
from importlib.metadata import entry_points

from jobs.processors.base import (
    Batch,
    Context,
    Param,
    ParamError,
    Processor,
    ProcessSpent,
    Record,
    data_column,
    spent,
)
from jobs.processors.clean_table import CleanTable
from jobs.processors.column_stats import ColumnStats
from jobs.processors.embed_text import EmbedText
from jobs.processors.image_thumbs import ImageThumbs
from jobs.processors.onnx_infer import OnnxInfer
from jobs.processors.partner_model import Classify, Embed, Generate

__all__ = [
    "Batch",
    "Context",
    "Param",
    "ParamError",
    "ProcessSpent",
    "Processor",
    "Record",
    "available",
    "data_column",
    "get",
    "runnable_here",
    "spent",
]

BUILT_IN: tuple[type[Processor], ...] = (
    CleanTable, Classify, ColumnStats, Embed, EmbedText, Generate, ImageThumbs, OnnxInfer
)  # fmt: skip


@cache
def _registry() -> dict[str, Processor]:
    found = [cls() for cls in BUILT_IN]
    found += [entry.load()() for entry in entry_points(group="e31.processors")]
    return {processor.name: processor for processor in found}


def available() -> list[Processor]:
    return sorted(_registry().values(), key=lambda processor: processor.name)


def runnable_here() -> list[str]:
    """The work kinds this machine can run: those whose required modules are installed."""
    return [processor.name for processor in available() if not processor.missing()]


def warm_runnable() -> list[str]:
    """Import the libraries of every work kind this machine can run, as a slot does before it forks its
    pool; the kinds warmed."""
    kinds = runnable_here()
    for name in kinds:
        get(name).warm()
    return kinds


def get(name: str) -> Processor:
    try:
        return _registry()[name]
    except KeyError:
        names = ", ".join(sorted(_registry()))
        raise ParamError(f"There is no work kind {name!r}; the kinds are: {names}.") from None
