"""A third-party work kind for the tests, registered through the `e31.processors` entry point.

`test-slow-echo` copies every field as text and sleeps a while per batch, so a test can catch a
shard while it runs: to kill its worker, to cancel its job, or to keep its GPUs busy. It can also
raise on a chosen record, to test a shard that fails every time, or on one slot, to test a retry
on another; or break its process's device as a CUDA error does, for every later batch there.
"""

import time
from pathlib import Path

import pyarrow as pa

from jobs.processors.base import Batch, Context, Param, Processor

_broken: list[int] = []  # this process's device is broken (by a device fault): it stays so


class SlowEcho(Processor):
    name = "test-slow-echo"
    title = "Echo slowly"
    description = "Copies each record as text, sleeping per batch (tests only)."
    version = "1"
    input_formats = ("csv", "jsonl")
    params = (
        Param("seconds_per_batch", float, 0.1, "How long each batch takes.", minimum=0.0, maximum=10.0),
        Param("fail_at_record", int, 0, "Raise on the batch holding this input position (0: never).", minimum=0),
        Param("fail_on_slot", int, -1, "Raise on every batch run on the slot of this index (-1: none).", minimum=-1),
        Param(
            "device_fault_at_record",
            int,
            0,
            "Break the process's device on the batch holding this input position: that batch and every later one "
            "the process runs raise a CUDA error (0: never). Once, while device_fault_marker does not exist.",
            minimum=0,
        ),
        Param("device_fault_marker", str, "", "The file made when the device fault is raised."),
    )
    batch_size = 50

    def output_schema(self, context: Context) -> pa.Schema:
        return pa.schema([(name, pa.string()) for name in context.layout["columns"]])

    def process_batch(self, records, context: Context) -> Batch:
        time.sleep(context.params["seconds_per_batch"])
        fault = context.params["device_fault_at_record"]
        if fault and any(record.position == fault for record in records):
            marker = Path(context.params["device_fault_marker"])
            if not marker.exists():
                marker.touch()
                _broken.append(fault)
        if _broken:
            raise RuntimeError("CUDA error: device-side assert triggered")
        if context.slot == context.params["fail_on_slot"]:
            raise RuntimeError(f"slot {context.slot} is broken")
        poison = context.params["fail_at_record"]
        if poison and any(record.position == poison for record in records):
            raise RuntimeError(f"record {poison} is poison")
        columns = context.layout["columns"]
        if context.layout["format"] == "csv":
            cells = [[record.value[i] for record in records] for i in range(len(columns))]
        else:
            cells = [[_text(record.value.get(name)) for record in records] for name in columns]
        table = pa.table([pa.array(column, pa.string()) for column in cells], schema=self.output_schema(context))
        return Batch(table=table, kept=[record.position for record in records])


def _text(value):
    return None if value is None else str(value)
