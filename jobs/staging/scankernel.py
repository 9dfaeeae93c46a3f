"""The one pass over a block of CSV bytes that staging's scan makes, compiled by numba.

numpy needed a dozen passes over each block (find the quotes and newlines, split them, count quote
parity, gather the bytes beside each quote, validate UTF-8), and could only tell record ends by
quote parity, which a quote inside an unquoted field breaks; this loop reads each byte once, skips
eight bytes at a time where none of them matters (no newline, quote, carriage return or non-ASCII
byte), and lets go of the GIL, so it runs beside the copy's hashing and writes. The code is compiled
the first time a process scans, and cached on disk (numba's cache) for the processes after it.
"""

import numpy as np
from numba import njit

ONES = np.uint64(0x0101010101010101)
HIGH_BITS = np.uint64(0x8080808080808080)
NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)
QUOTES = np.uint64(0x2222222222222222)
RETURNS = np.uint64(0x0D0D0D0D0D0D0D0D)
QUOTE, NEWLINE, RETURN = 0x22, 0x0A, 0x0D


@njit(nogil=True, cache=True, inline="always")
def _holds(word, spread):
    """Non-zero when one of the word's eight bytes is the byte spread over `spread`."""
    x = word ^ spread
    return (x - ONES) & ~x & HIGH_BITS


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
def scan_block(data, words, filled, last, delimiter, ends, lines, split):
    """Read data[:filled], which starts where a record starts, as Python's csv module in strict mode
    reads it: a quote opens a quoted field only at the field's start (after a delimiter or a newline);
    elsewhere in an unquoted field it is a plain character (an inch mark); in a quoted field two
    quotes stand for one, and a quote before a delimiter or a line end closes it. Each newline
    outside a quoted field ends a record: its offset goes into `ends`, the newlines up to it (itself
    included) into `lines`, and into `split` whether a delimiter outside quotes split the record into
    fields (else it is one field, which may be blank).

    Return the records ended, the newlines, whether a quoted field is still open at the end, and the
    offset of the first byte this reading cannot vouch for (`filled` when there is none): a byte that
    is not UTF-8, a carriage return not before a newline, a closing quote followed by anything but a
    delimiter or a line end (csv's error). `last`: nothing follows data[:filled]. `words` is data
    seen as uint64, for the skip over bytes that do not matter."""
    newlines = count = 0
    quoted = fields = False
    doubt = filled
    delimiters = ONES * np.uint64(delimiter)
    i = 0
    while i < filled:
        if (i & 7) == 0 and i + 8 <= filled:
            word = words[i >> 3]
            if not (_holds(word, NEWLINES) | _holds(word, QUOTES) | _holds(word, RETURNS) | (word & HIGH_BITS)):
                if not quoted and _holds(word, delimiters):
                    fields = True
                i += 8  # nothing else here that matters
                continue
        byte = data[i]
        step = 1
        if byte == QUOTE:
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
                    doubt = min(doubt, i)
            elif last:
                quoted = False  # closed by the end of the data
        elif byte == NEWLINE:
            newlines += 1
            if not quoted:
                ends[count] = i
                lines[count] = newlines
                split[count] = fields
                count += 1
                fields = False
        elif byte == RETURN:
            if i + 1 >= filled or data[i + 1] != NEWLINE:
                doubt = min(doubt, i)
        elif byte >= 0x80:
            step = _utf8_length(data, i, filled)
            if step == 0:
                doubt = min(doubt, i)
                step = 1
        elif not fields and byte == delimiter and not quoted:
            fields = True
        i += step
    return count, newlines, quoted, doubt
