"""What people and peers type, read safely: names and texts without the invisible characters that let a name
disguise itself on a page or in a console, counts and numbers read as ASCII digits only, and URLs
shown without the query that may carry a credential."""

import re
import unicodedata
from decimal import Decimal
from urllib.parse import urlsplit, urlunsplit

from django import forms

# Cf holds the bidi overrides, embeddings, isolates and marks (U+202A to 202E, U+2066 to 2069, U+200E to 200F,
# U+061C), the zero-width space (U+200B), the word joiner (U+2060), the BOM (U+FEFF), the soft hyphen and tag
# characters; Cc the C0 and C1 controls; Cs lone surrogates. None of them is seen, and each can change what is.
_HIDDEN = frozenset({"Cc", "Cf", "Cs"})
# The zero-width non-joiner and joiner are Cf too, but they spell words: Persian "می‌خواهم", Indic conjuncts, emoji
# sequences. Between letters they stay; at either end of a name they join nothing, and go with the spaces.
_JOINERS = "\u200c\u200d"
_EDGES = re.compile(rf"^[\s{_JOINERS}]+|[\s{_JOINERS}]+$")
# Characters that break a line: in a one-line name they become a space, in a text a newline.
_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")
# A count in a header: ASCII digits alone. str.isdigit() also takes "²" (which int() refuses) and "١٢٣"
# (which int() reads as 123). Past 4,000 digits int() refuses it too; callers compare the rest to their limits.
_COUNT = re.compile(r"[0-9]{1,4000}")
# A number with a fraction, as people write one: ASCII digits and at most one point (Decimal() and float() also
# take Arabic-Indic digits, "1_000", "1e3", "inf" and "nan").
# What a spreadsheet reads as the start of a formula in a CSV cell, and the numbers that may start so.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_SIGNED_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def _cleaned(text: str, keep: str) -> str:
    """`text` without its hidden characters (but those in `keep`), in NFC, trimmed of spaces and joiners."""
    kept = "".join(char for char in text if char in keep or unicodedata.category(char) not in _HIDDEN)
    return _EDGES.sub("", unicodedata.normalize("NFC", kept))


def clean_name(text: str) -> str:
    """A one-line name (a person's, an organisation's, a file's, a parameter's value) as it shows: line
    breaks and tabs become spaces, invisible characters go (the joiners stay between letters), then NFC and
    trimmed."""
    return _cleaned(_BREAKS.sub(" ", text).replace("\t", " "), keep=_JOINERS)


def clean_text(text: str) -> str:
    """A text of several lines, cleaned as a name is but keeping its newlines (as \\n) and tabs."""
    return _cleaned(_BREAKS.sub("\n", text), keep=f"\n\t{_JOINERS}")


def hidden_character(text: str) -> str | None:
    """The first character of `text` that clean_name would remove or make a space, as "U+202E RIGHT-TO-LEFT
    OVERRIDE", or None. A value used exactly as typed (a URL, a path) is refused for one, not cleaned: the
    cleaned value would name something else."""
    for char in text:
        if _BREAKS.match(char) or (char not in _JOINERS and unicodedata.category(char) in _HIDDEN):
            return f"U+{ord(char):04X} {unicodedata.name(char, '')}".strip()
    return None


def ascii_count(text: str | None, *, signed: bool = False) -> int | None:
    """A whole number written as ASCII digits only (no space, exponent, plus sign or other script's digits;
    a minus sign when `signed`, so that a form can say the number is too small), or None for anything else."""
    if text is None or not _COUNT.fullmatch(text.removeprefix("-") if signed else text):
        return None
    return int(text)


def ascii_decimal(text: str | None, *, signed: bool = False) -> Decimal | None:
    """A number written as ASCII digits with at most one decimal point (no space, exponent, plus sign, digit
    grouping or other script's digits; a minus sign when `signed`), or None for anything else."""
    if text is None or not _DECIMAL.fullmatch(text.removeprefix("-") if signed else text):
        return None
    return Decimal(text)


def csv_cell(value):
    """A cell as a spreadsheet opens it: text that begins with =, +, -, @ (or a tab or a carriage return) is read
    there as a formula, so it gets an apostrophe before it (OWASP's guard); a number (a credit's -3.60) stays."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS) and not _SIGNED_NUMBER.fullmatch(value):
        return f"'{value}"
    return value


def shown(value, limit: int = 40) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters (one can be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


class _Cleaned:
    """A form field whose value is cleaned before it is checked: a name made only of invisible characters
    is an empty one, and its length is counted without them."""

    cleaner = staticmethod(clean_name)

    def to_python(self, value):
        value = super().to_python(value)
        return (self.cleaner(value) or self.empty_value) if isinstance(value, str) else value


class NameField(_Cleaned, forms.CharField):
    """A one-line text field, cleaned by clean_name."""


class TextField(_Cleaned, forms.CharField):
    """A text field of several lines, cleaned by clean_text."""

    cleaner = staticmethod(clean_text)


class EmailField(_Cleaned, forms.EmailField):
    """An email address, cleaned by clean_name before it is validated."""


class CountField(forms.IntegerField):
    """A whole number typed in ASCII digits (surrounding spaces and a minus aside): IntegerField also reads "١٢٣"
    and "5.0". At most what the database holds, unless the field says less: past a float's range, arithmetic
    with it raises."""

    def __init__(self, *, max_value: int = 2**63 - 1, **kwargs):
        super().__init__(max_value=max_value, **kwargs)

    def to_python(self, value):
        if isinstance(value, str) and value.strip() and ascii_count(value.strip(), signed=True) is None:
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


def redacted(url: str) -> str:
    """The URL as shown, recorded and logged: its query, where a pre-signed URL carries its signature,
    left out (a credential in all but name)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL (an IPv6 bracket never closed): shown up to where a query would begin
        return url.split("?", 1)[0].split("#", 1)[0]
    return urlunsplit(parts._replace(query="…" if parts.query else "", fragment=""))
