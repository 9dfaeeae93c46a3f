"""Data the tests generate: numbered CSV records, a table of numbers, pictures, zip or tar archives of files,
and a small ONNX model."""

import csv
import io
import tarfile
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper
from PIL import Image


def csv_bytes(rows: int = 2000) -> bytes:
    return ("id,text\n" + "".join(f"{n},record {n}\n" for n in range(1, rows + 1))).encode()


def picture(size=(640, 480), kind="PNG", colour=(200, 30, 30), exif: bool = False) -> bytes:
    image = Image.new("RGB", size, colour)
    width, height = size
    for n, shade in enumerate((40, 220, 90, 160)):  # blocks in proportion to the size: the same picture at any size
        image.paste((shade, shade, 255 - shade), (n * width // 5, n * height // 6, (n + 2) * width // 5, height))
    out = io.BytesIO()
    extra = {}
    if exif:
        tags = Image.Exif()
        tags[0x010F] = "Secret Camera Maker"
        extra["exif"] = tags.tobytes()
    image.save(out, kind, **extra)
    return out.getvalue()


def zipped(files: dict[str, bytes], compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def tarred(files: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for info in extra:
            archive.addfile(info)
    return out.getvalue()


def table_csv(rows: int = 1200) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "a", "b", "c", "note"])
    for i in range(1, rows + 1):
        writer.writerow([i, i / 10, (i % 7) - 3, 1.5 - i / 100, f"row {i}"])
    return out.getvalue().encode()


WEIGHTS = np.array([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], dtype=np.float32)
BIAS = np.array([0.1, -0.2], dtype=np.float32)


def model_bytes(graph) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def linear_model(batch="N", width=3, out_type=TensorProto.FLOAT) -> bytes:
    """features [N, 3] → score = features · W + b [N, 2], and label = argmax(score) [N]."""
    nodes = [
        helper.make_node("MatMul", ["features", "W"], ["product"]),
        helper.make_node("Add", ["product", "B"], ["raw_score"]),
        helper.make_node("Cast", ["raw_score"], ["score"], to=out_type),
        helper.make_node("ArgMax", ["raw_score"], ["label"], axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "linear",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [batch, width])],
        [
            helper.make_tensor_value_info("score", out_type, [batch, 2]),
            helper.make_tensor_value_info("label", TensorProto.INT64, [batch]),
        ],
        initializer=[
            helper.make_tensor("W", TensorProto.FLOAT, [3, 2], WEIGHTS.flatten().tolist()),
            helper.make_tensor("B", TensorProto.FLOAT, [2], BIAS.tolist()),
        ],
    )
    return model_bytes(graph)
