"""The one pass over a block of CSV bytes that staging's scan makes, compiled by numba.

The pass takes 64 bytes at a time: one vector compare each gives a 64-bit mask of where the quotes,
newlines, delimiters, carriage returns and non-ASCII bytes are; the running XOR of the quote mask
tells which bytes lie inside quoted fields (the way simdjson and simdcsv find strings), and the
newlines outside them end records. Where 64 bytes hold something the masks cannot read as Python's
csv module would — a quote inside an unquoted field (an inch mark), a closing quote followed by more
of the field, a carriage return alone, bytes that are not UTF-8 — the same 64 bytes are read a byte
at a time instead, which also says where the doubt lies. A closing quote followed by more of the
field is the csv module's error: the record it is in ends at the end of that line, unreadable, as
the exact read rejects it. The code is compiled the first time a process scans, and cached on disk
(numba's cache) for the processes after it; it lets go of the GIL, so it runs beside the copy's
hashing and writes.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types, uint64
from numba.extending import intrinsic

LANES = 64  # bytes a mask covers
LOOKAHEAD = 4  # bytes past a 64 that the masked read looks at: the next byte, a UTF-8 sequence's tail
EVERY_BIT = np.uint64(0xFFFFFFFFFFFFFFFF)
QUOTE, NEWLINE, RETURN = 0x22, 0x0A, 0x0D
ONE_FIELD, FIELDS, UNREADABLE = 0, 1, 2  # what a record is, in `kinds`: one field (maybe blank), split, rejected


def _bytes_at(context, builder, array_type, array, start):
    """The 64 bytes of a uint8 array from `start`, as one vector (no alignment asked)."""
    vector = ir.VectorType(ir.IntType(8), LANES)
    pointer = builder.gep(context.make_array(array_type)(context, builder, array).data, [start])
    return builder.load(builder.bitcast(pointer, vector.as_pointer()), align=1), vector


def _bytes_of(data) -> bool:
    return isinstance(data, types.Array) and data.dtype == types.uint8 and data.ndim == 1 and data.layout == "C"


@intrinsic
def _equal_bits(typingctx, data, start, byte):
    """Bit k set where data[start + k] == byte, for k < 64; the caller keeps start + 64 in bounds."""
    if not _bytes_of(data):
        return None

    def codegen(context, builder, signature, args):
        loaded, vector = _bytes_at(context, builder, signature.args[0], args[0], args[1])
        lane = ir.Constant(ir.IntType(32), 0)
        one = builder.insert_element(ir.Constant(vector, ir.Undefined), builder.trunc(args[2], ir.IntType(8)), lane)
        spread = builder.shuffle_vector(
            one, ir.Constant(vector, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES)
        )
        return builder.bitcast(builder.icmp_unsigned("==", loaded, spread), ir.IntType(LANES))

    return types.uint64(data, start, byte), codegen


@intrinsic
def _between_bits(typingctx, data, start, low, high):
    """Bit k set where low <= data[start + k] <= high, for k < 64."""
    if not _bytes_of(data):
        return None

    def codegen(context, builder, signature, args):
        loaded, vector = _bytes_at(context, builder, signature.args[0], args[0], args[1])
        low, high = signature.args[2].literal_value, signature.args[3].literal_value
        offset = builder.sub(loaded, ir.Constant(vector, [low] * LANES))
        within = builder.icmp_unsigned("<=", offset, ir.Constant(vector, [high - low] * LANES))
        return builder.bitcast(within, ir.IntType(LANES))

    if not (isinstance(low, types.IntegerLiteral) and isinstance(high, types.IntegerLiteral)):
        return None
    return types.uint64(data, start, low, high), codegen


@intrinsic
def _ones(typingctx, word):
    """The bits set in a uint64 (one popcnt)."""

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(word), codegen


@intrinsic
def _lowest(typingctx, word):
    """The place of a non-zero uint64's lowest set bit (one tzcnt)."""

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return types.uint64(word), codegen


@njit(nogil=True, cache=True, inline="always")
def _running_xor(bits):
    """Bit k set where bits 0..k hold an odd number of set bits: inside a quoted field, for quotes."""
    for shift in (1, 2, 4, 8, 16, 32):
        bits ^= bits << uint64(shift)
    return bits


@njit(nogil=True, cache=True, inline="always")
def _utf8_length(data, i, filled):
    """The length of the well-formed UTF-8 sequence that starts at the non-ASCII byte data[i]; 0 when
    there is none (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut off)."""
    lead = data[i]
    if 0xC2 <= lead <= 0xDF:
        follow, low, high = 1, 0x80, 0xBF
    elif lead == 0xE0:
        follow, low, high = 2, 0xA0, 0xBF
    elif 0xE1 <= lead <= 0xEC or 0xEE <= lead <= 0xEF:
        follow, low, high = 2, 0x80, 0xBF
    elif lead == 0xED:
        follow, low, high = 2, 0x80, 0x9F
    elif lead == 0xF0:
        follow, low, high = 3, 0x90, 0xBF
    elif 0xF1 <= lead <= 0xF3:
        follow, low, high = 3, 0x80, 0xBF
    elif lead == 0xF4:
        follow, low, high = 3, 0x80, 0x8F
    else:
        return 0
    if i + follow >= filled or not low <= data[i + 1] <= high:
        return 0
    for k in range(2, follow + 1):
        if not 0x80 <= data[i + k] <= 0xBF:
            return 0
    return follow + 1


@njit(nogil=True, cache=True)
def scan_block(data, filled, last, delimiter, ends, lines, kinds):
    """Read data[:filled], which starts where a record starts, as Python's csv module in strict mode
    reads it: a quote opens a quoted field only at the field's start (after a delimiter or a newline);
    elsewhere in an unquoted field it is a plain character (an inch mark); in a quoted field two
    quotes stand for one, and a quote before a delimiter or a line end closes it; a closing quote
    followed by anything else (csv's error) makes its record UNREADABLE, ended by the next newline.
    Each newline outside a quoted field ends a record: its offset goes into `ends`, the newlines up
    to it (itself included) into `lines`, and into `kinds` whether a delimiter outside quotes split
    the record into FIELDS, or it is ONE_FIELD (which may be blank), or UNREADABLE.

    Return the records ended, the newlines, whether a quoted field is still open at the end, and the
    offset of the first byte this reading cannot vouch for (`filled` when there is none): a byte that
    is not UTF-8, a carriage return not before a newline. `last`: nothing follows data[:filled]."""
    newlines = count = 0
    quoted = fields = broken = False  # broken: in an unreadable record, up to the end of its line
    closed = False  # the byte before i is a quote that closed a quoted field
    checked = 0  # the UTF-8 before this offset is checked
    doubt = filled
    i = 0
    while i < filled:
        if not broken and i + LANES + LOOKAHEAD <= filled:
            quotes = _equal_bits(data, i, QUOTE)
            breaks = _equal_bits(data, i, NEWLINE)
            commas = _equal_bits(data, i, delimiter)
            returns = _equal_bits(data, i, RETURN)
            next_byte = data[i + LANES]
            plain = True
            if returns:  # each carriage return comes before a newline
                before_breaks = (breaks >> uint64(1)) | (uint64(next_byte == NEWLINE) << uint64(LANES - 1))
                plain = (returns & ~before_breaks) == 0
            through = checked
            wide = _between_bits(data, i, 0x80, 0xFF) if plain else uint64(0)  # not ASCII
            if wide:  # two-byte characters (most accented letters) checked by mask, the rest one by one
                follows = _between_bits(data, i, 0x80, 0xBF)
                leads = _between_bits(data, i, 0xC2, 0xDF)
                carried = (uint64(1) << uint64(checked - i)) - uint64(1) if checked > i else uint64(0)
                spills = (leads >> uint64(LANES - 1)) != 0  # its second byte is the next 64's first
                if (
                    wide == follows | leads
                    and follows == (leads << uint64(1)) | carried
                    and (not spills or 0x80 <= next_byte <= 0xBF)
                ):
                    wide = uint64(0)
                    through = i + LANES + int(spills)
            while wide:
                at = i + int(_lowest(wide))
                wide &= wide - uint64(1)
                if at >= through:
                    length = _utf8_length(data, at, filled)
                    plain = length > 0
                    if not plain:
                        break
                    through = at + length
            inside = _running_xor(quotes)
            if quoted:
                inside = ~inside
            if plain and quotes:
                opening, closing = quotes & inside, quotes & ~inside
                at_start = i == 0 or data[i - 1] == delimiter or data[i - 1] == NEWLINE
                starts = ((commas | breaks) << uint64(1)) | uint64(at_start)
                pairs = (closing << uint64(1)) | uint64(closed)  # a quote after a closing one: two stand for one
                ends_field = (quotes | commas | breaks | returns) >> uint64(1)
                if next_byte in (QUOTE, delimiter, NEWLINE, RETURN):
                    ends_field |= uint64(1) << uint64(LANES - 1)
                plain = (opening & ~(starts | pairs)) == 0 and (closing & ~ends_field) == 0
            if plain:
                record_ends, fielded = breaks & ~inside, commas & ~inside
                done = uint64(0)  # the bits of the records ended so far
                while record_ends:
                    upto = EVERY_BIT >> (uint64(LANES - 1) - _lowest(record_ends))
                    ends[count] = i + int(_lowest(record_ends))
                    lines[count] = newlines + int(_ones(breaks & upto))
                    kinds[count] = FIELDS if fields or (fielded & upto & ~done) != 0 else ONE_FIELD
                    count += 1
                    fields = False
                    done = upto
                    record_ends &= record_ends - uint64(1)
                fields = fields or (fielded & ~done) != 0
                newlines += int(_ones(breaks))
                quoted = (inside >> uint64(LANES - 1)) != 0
                closed = ((quotes & ~inside) >> uint64(LANES - 1)) != 0
                checked = through
                i += LANES
                continue
        # A byte at a time, up to the next 64.
        end = min(i + LANES, filled)
        if closed and data[i] == QUOTE:
            quoted = True  # the second of two quotes in a quoted field: the field goes on
            i += 1
        closed = False
        while i < end:
            byte = data[i]
            step = 1
            if byte == QUOTE and not broken:
                if not quoted:
                    before = data[i - 1] if i > 0 else NEWLINE
                    quoted = before in (delimiter, NEWLINE)
                elif i + 1 < filled:
                    after = data[i + 1]
                    if after == QUOTE:
                        step = 2  # a quote in a quoted field
                    elif after in (delimiter, NEWLINE, RETURN):
                        quoted = False
                    else:
                        quoted, broken = False, True
                elif last:
                    quoted = False  # closed by the end of the data
            elif byte == NEWLINE:
                newlines += 1
                if not quoted:
                    ends[count] = i
                    lines[count] = newlines
                    kinds[count] = UNREADABLE if broken else FIELDS if fields else ONE_FIELD
                    count += 1
                    fields = broken = False
            elif byte == RETURN:
                if i + 1 >= filled or data[i + 1] != NEWLINE:
                    doubt = min(doubt, i)
            elif byte >= 0x80:
                if i >= checked:
                    step = _utf8_length(data, i, filled)
                    if step == 0:
                        doubt = min(doubt, i)
                        step = 1
            elif not fields and byte == delimiter and not quoted:
                fields = True
            i += step
        checked = max(checked, i)
    return count, newlines, quoted, doubt


def warm() -> None:
    """Compile the scan now, or load it from numba's cache, so that a worker's first staging does not
    wait for it (about 3 s the first time on a machine, 0.2 s after). The arguments have the types
    staging's own call gives (a writable block, Python ints, a bool), so this is the code it runs."""
    block = np.frombuffer(bytearray(b"id,name\n1,a\n" * 16), np.uint8)
    ends, lines, kinds = np.empty(len(block), np.int64), np.empty(len(block), np.int64), np.empty(len(block), np.uint8)
    scan_block(block, len(block), True, ord(","), ends, lines, kinds)
