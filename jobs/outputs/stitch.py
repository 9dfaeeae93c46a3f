"""Stitch Parquet parts into one Parquet file without decoding them.

A Parquet file is its pages, then its footer (a Thrift FileMetaData in the compact protocol), the
footer's length and the magic. The parts' pages are copied as bytes, one after another, and their
footers merged into one: the row groups of every part in order, each offset moved by where its part's
pages now start. Copying bytes costs a small fraction of decoding and encoding them again, and it
keeps every page exactly as the slot wrote it. pyarrow can merge footers (FileMetaData.append_row_groups)
but not move offsets, so the footer is read and written here, field by field, keeping every field
it does not change as it was.
"""

import hashlib
import struct
from collections.abc import Iterable
from typing import BinaryIO

MAGIC = b"PAR1"
COPY_BLOCK = 4 * 1024 * 1024

# The compact protocol's types (Thrift's TCompactProtocol).
STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)

# Field ids of parquet.thrift: FileMetaData, RowGroup, ColumnChunk and ColumnMetaData.
FILE_SCHEMA, FILE_NUM_ROWS, FILE_ROW_GROUPS = 2, 3, 4
GROUP_COLUMNS, GROUP_FILE_OFFSET, GROUP_ORDINAL = 1, 5, 7
CHUNK_FILE_PATH, CHUNK_FILE_OFFSET, CHUNK_META = 1, 2, 3
CHUNK_OFFSET_INDEX, CHUNK_COLUMN_INDEX, CHUNK_CRYPTO, CHUNK_ENCRYPTED_META = 4, 6, 8, 9
META_DATA_PAGE, META_INDEX_PAGE, META_DICTIONARY_PAGE, META_BLOOM_FILTER = 9, 10, 11, 14
# Offsets that point outside the pages (page indexes, bloom filters) or a footer that is encrypted
# would need more than a shift: parts are written without them, and a part that has them is refused.
NOT_STITCHABLE = {CHUNK_FILE_PATH, CHUNK_OFFSET_INDEX, CHUNK_COLUMN_INDEX, CHUNK_CRYPTO, CHUNK_ENCRYPTED_META}


class StitchError(Exception):
    """The parts cannot be stitched: not Parquet, schemas that differ, or features a shift cannot move."""


# What stitching reads of a footer, field ids by struct: the row groups' rows and offsets, and of each
# column chunk the offsets. Every other field is kept as its bytes (Raw), walked over but not decoded:
# most of a footer is statistics and schema, and decoding them in Python would cost more than the copy.
COLUMN_META_READ = {META_DATA_PAGE: None, META_INDEX_PAGE: None, META_DICTIONARY_PAGE: None}
CHUNK_READ = {CHUNK_FILE_OFFSET: None, CHUNK_META: COLUMN_META_READ}
GROUP_READ = {GROUP_COLUMNS: CHUNK_READ, GROUP_FILE_OFFSET: None, GROUP_ORDINAL: None, 3: None}
FILE_READ = {FILE_NUM_ROWS: None, FILE_ROW_GROUPS: GROUP_READ}


class Raw(bytes):
    """A field's value as the footer holds it, written back as it was."""


class Field:
    """One field of a Thrift struct: its id, its type, and its value (or its bytes, Raw)."""

    __slots__ = ("id", "kind", "value")

    def __init__(self, id: int, kind: int, value):
        self.id, self.kind, self.value = id, kind, value


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def byte(self) -> int:
        value = self.data[self.at]
        self.at += 1
        return value

    def take(self, size: int) -> bytes:
        chunk = self.data[self.at : self.at + size]
        if len(chunk) != size:
            raise StitchError("the footer ends in the middle of a value")
        self.at += size
        return chunk

    def varint(self) -> int:
        shift = result = 0
        while True:
            value = self.byte()
            result |= (value & 0x7F) << shift
            shift += 7
            if not value & 0x80:
                return result

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def value(self, kind: int, read: dict | None = None):
        if kind in (TRUE, FALSE):  # a boolean field carries its value in its type
            return kind == TRUE
        if kind == BYTE:
            return self.byte()
        if kind in (I16, I32, I64):
            return self.zigzag()
        if kind == DOUBLE:
            return self.take(8)
        if kind == BINARY:
            return self.take(self.varint())
        if kind in (LIST, SET):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if element in (TRUE, FALSE):  # in a list a boolean is a byte of its own
                return element, [self.byte() for _ in range(size)]
            return element, [self.value(element, read) for _ in range(size)]
        if kind == MAP:
            size = self.varint()
            if not size:
                return 0, 0, []
            kinds = self.byte()
            key, value = kinds >> 4, kinds & 0x0F
            return key, value, [(self.value(key), self.value(value)) for _ in range(size)]
        if kind == STRUCT:
            return self.struct(read)
        raise StitchError(f"unknown Thrift type {kind} in the footer")

    def struct(self, read: dict | None = None) -> list[Field]:
        """The struct's fields: those in `read` (all when None) decoded, the others kept as bytes."""
        fields, last = [], 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == STOP:
                return fields
            last = last + (head >> 4) if head >> 4 else self.zigzag()
            if read is None or last in read or kind in (TRUE, FALSE):
                fields.append(Field(last, kind, self.value(kind, read[last] if read else None)))
            else:
                start = self.at
                self.skip(kind)
                fields.append(Field(last, kind, Raw(self.data[start : self.at])))

    def skip(self, kind: int) -> None:
        """Walk over a value without decoding it."""
        if kind == BYTE:
            self.at += 1
        elif kind == DOUBLE:
            self.at += 8
        elif kind in (I16, I32, I64):
            self.varint()
        elif kind == BINARY:
            size = self.varint()
            self.at += size
        elif kind in (LIST, SET):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if element in (TRUE, FALSE, BYTE):
                self.at += size
            else:
                for _ in range(size):
                    self.skip(element)
        elif kind == MAP:
            size = self.varint()
            if size:
                kinds = self.byte()
                for _ in range(size):
                    self.skip(kinds >> 4)
                    self.skip(kinds & 0x0F)
        elif kind == STRUCT:
            while (head := self.byte()) & 0x0F != STOP:
                if not head >> 4:
                    self.zigzag()
                self.skip(head & 0x0F)
        elif kind not in (TRUE, FALSE):
            raise StitchError(f"unknown Thrift type {kind} in the footer")


class _Writer:
    def __init__(self):
        self.out = bytearray()

    def varint(self, value: int) -> None:
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def zigzag(self, value: int) -> None:
        self.varint((value << 1) ^ (value >> 63))

    def value(self, kind: int, value) -> None:
        if kind in (TRUE, FALSE):
            return
        if isinstance(value, Raw):
            self.out += value
        elif kind == BYTE:
            self.out.append(value)
        elif kind in (I16, I32, I64):
            self.zigzag(value)
        elif kind == DOUBLE:
            self.out += value
        elif kind == BINARY:
            self.varint(len(value))
            self.out += value
        elif kind in (LIST, SET):
            element, items = value
            if len(items) < 15:
                self.out.append(len(items) << 4 | element)
            else:
                self.out.append(0xF0 | element)
                self.varint(len(items))
            for item in items:
                if element in (TRUE, FALSE):
                    self.out.append(item)
                else:
                    self.value(element, item)
        elif kind == MAP:
            key, kind_of_value, items = value
            self.varint(len(items))
            if items:
                self.out.append(key << 4 | kind_of_value)
            for item_key, item_value in items:
                self.value(key, item_key)
                self.value(kind_of_value, item_value)
        elif kind == STRUCT:
            self.struct(value)

    def struct(self, fields: list[Field]) -> None:
        last = 0
        for field in fields:
            kind = (TRUE if field.value else FALSE) if field.kind in (TRUE, FALSE) else field.kind
            if 0 < field.id - last <= 15:
                self.out.append((field.id - last) << 4 | kind)
            else:
                self.out.append(kind)
                self.zigzag(field.id)
            last = field.id
            self.value(kind, field.value)
        self.out.append(STOP)


def decode(footer: bytes, read: dict | None = None) -> list[Field]:
    return _Reader(footer).struct(read)


def encode(fields: list[Field]) -> bytes:
    writer = _Writer()
    writer.struct(fields)
    return bytes(writer.out)


def _field(fields: list[Field], id: int) -> Field | None:
    return next((field for field in fields if field.id == id), None)


def read_footer(part: BinaryIO) -> tuple[int, list[Field]]:
    """Where the part's pages end, and its footer decoded."""
    size = part.seek(0, 2)
    if size < 12:
        raise StitchError("too short to be a Parquet file")
    part.seek(size - 8)
    length_and_magic = part.read(8)
    part.seek(0)
    if part.read(4) != MAGIC or length_and_magic[4:] != MAGIC:
        raise StitchError("not a Parquet file (no PAR1 at its start and end)")
    (length,) = struct.unpack("<I", length_and_magic[:4])
    pages_end = size - 8 - length
    if pages_end < 4:
        raise StitchError("its footer is longer than the file")
    part.seek(pages_end)
    return pages_end, decode(part.read(length), FILE_READ)


def _shift(group: list[Field], by: int, ordinal: int) -> None:
    """Move a row group's offsets by `by` bytes and number it `ordinal` in the stitched file."""
    for field in group:
        if field.id == GROUP_FILE_OFFSET and field.value > 0:
            field.value += by
        elif field.id == GROUP_ORDINAL:
            field.value = ordinal
        elif field.id == GROUP_COLUMNS:
            for chunk in field.value[1]:
                _shift_chunk(chunk, by)


def _shift_chunk(chunk: list[Field], by: int) -> None:
    for field in chunk:
        if field.id in NOT_STITCHABLE:
            raise StitchError("a column chunk has a page index, another file or encryption")
        if field.id == CHUNK_FILE_OFFSET and field.value > 0:
            field.value += by
        elif field.id == CHUNK_META:
            for meta in field.value:
                if meta.id == META_BLOOM_FILTER:
                    raise StitchError("a column chunk has a bloom filter")
                if meta.id in (META_DATA_PAGE, META_INDEX_PAGE, META_DICTIONARY_PAGE):
                    meta.value += by


def _file_wide(footer: list[Field]) -> bytes:
    """The footer but its rows: schema, key-value metadata (Arrow's schema), writer, column orders."""
    return encode([field for field in footer if field.id not in (FILE_NUM_ROWS, FILE_ROW_GROUPS)])


def stitch(parts: Iterable[BinaryIO], out: BinaryIO) -> dict:
    """Write the parts, in order, as one Parquet file to `out`; its size and SHA-256, taken as it is
    written. Every part must have the first one's schema."""
    sha256 = hashlib.sha256(MAGIC)
    out.write(MAGIC)
    written, head, groups = len(MAGIC), None, []
    for part in parts:
        pages_end, footer = read_footer(part)
        if head is None:
            head = footer
        elif _file_wide(footer) != _file_wide(head):
            raise StitchError("a part's schema or file metadata differs from the first part's")
        row_groups = _field(footer, FILE_ROW_GROUPS)
        for group in row_groups.value[1] if row_groups else []:
            _shift(group, written - len(MAGIC), len(groups))
            groups.append(group)
        part.seek(len(MAGIC))
        left = pages_end - len(MAGIC)
        while left:
            block = part.read(min(COPY_BLOCK, left))
            if not block:
                raise StitchError("a part ended before its footer")
            out.write(block)
            sha256.update(block)
            left -= len(block)
        written += pages_end - len(MAGIC)
    if head is None:
        raise StitchError("no parts to stitch")
    rows = sum(_field(group, 3).value for group in groups)
    merged = []
    for field in head:
        if field.id == FILE_NUM_ROWS:
            field = Field(FILE_NUM_ROWS, I64, rows)
        elif field.id == FILE_ROW_GROUPS:
            field = Field(FILE_ROW_GROUPS, LIST, (STRUCT, groups))
        merged.append(field)
    if _field(head, FILE_ROW_GROUPS) is None:
        raise StitchError("a part's footer has no row groups field")
    footer = encode(merged)
    tail = footer + struct.pack("<I", len(footer)) + MAGIC
    out.write(tail)
    sha256.update(tail)
    return {"bytes": written + len(tail), "sha256": sha256.hexdigest()}
