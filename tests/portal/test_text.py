"""portal.text: names without the characters that disguise them, and counts in ASCII digits only."""

from decimal import Decimal

import pytest
from django.test import RequestFactory

from portal.text import ascii_count, ascii_decimal, clean_name, clean_text, csv_cell, hidden_character, shown
from portal.throttling import client_ip

# Right-to-left override, zero-width space, left-to-right isolate, byte-order mark, Arabic letter mark, left-to-right
# mark, word joiner, soft hyphen, a tag character and a C1 control: none of them is seen.
HIDDEN = ["\u202e", "\u200b", "\u2066", "\ufeff", "\u061c", "\u200e", "\u2060", "\u00ad", "\U000e0041", "\x9b"]


@pytest.mark.parametrize("hidden", HIDDEN)
def test_it_removes_invisible_and_direction_changing_characters_from_a_name(hidden):
    assert clean_name(f"invoice{hidden}gnp.exe") == "invoicegnp.exe"
    assert clean_name(f"{hidden} Ada Lovelace {hidden}") == "Ada Lovelace"


def test_it_turns_line_breaks_and_tabs_in_a_name_into_spaces_and_composes_accents():
    assert clean_name("Ada\r\nLovelace\u2028of\tLab") == "Ada Lovelace of Lab"
    assert clean_name("Chloe\u0301") == "Chloé" and len(clean_name("Chloe\u0301")) == 5
    assert clean_name("\u2067\u2069") == ""


def test_it_keeps_the_joiners_that_spell_a_word_between_letters():
    persian, family = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\U0001f469\u200d\U0001f467"
    assert clean_name(persian) == persian and clean_name(f"{family} team") == f"{family} team"
    assert clean_text(f"notes on {persian}\n") == f"notes on {persian}"


def test_it_drops_joiners_that_join_nothing_at_either_end_of_a_name():
    assert clean_name("\u200d Ada \u200c") == "Ada"
    assert clean_name("\u200c\u200d") == ""


@pytest.mark.parametrize("hidden", HIDDEN)
def test_it_names_the_first_character_a_value_used_as_typed_must_not_hold(hidden):
    found = hidden_character(f"s3://bucket/a{hidden}b\u202e.csv")
    assert found == hidden_character(hidden) and found.startswith(f"U+{ord(hidden):04X}")


def test_it_finds_nothing_hidden_in_joiners_accents_and_spaces():
    assert hidden_character("/srv/cafe\u0301 \u0645\u06cc\u200c\u062e \U0001f469\u200d\U0001f467.csv") is None
    assert hidden_character("a\u2028b") == "U+2028 LINE SEPARATOR"


def test_it_keeps_the_lines_and_tabs_of_a_text():
    assert clean_text("12M cards\r\n\u202escanned\tby hand\u200b\n") == "12M cards\nscanned\tby hand"


@pytest.mark.parametrize("text", ["0", "5", "0042", "9" * 4000])
def test_it_reads_counts_in_ascii_digits(text):
    assert ascii_count(text) == int(text)


@pytest.mark.parametrize("text", [None, "", "²", "١٢٣", "+5", " 5", "5 ", "5\n", "-1", "1e3", "0x1", "1_0", "9" * 4001])
def test_it_reads_nothing_else_as_a_count(text):
    assert ascii_count(text) is None


@pytest.mark.parametrize(
    ("text", "value"), [("0", "0"), ("1.5", "1.5"), (".25", "0.25"), ("2.", "2"), ("9" * 5000, "9" * 5000)]
)
def test_it_reads_numbers_in_ascii_digits_with_one_point(text, value):
    assert ascii_decimal(text) == Decimal(value)
    assert ascii_decimal(f"-{text}", signed=True) == Decimal(f"-{value}")


@pytest.mark.parametrize(
    "text", [None, "", ".", "١٫٥", "1.٥", "+1.5", " 1.5", "1.5\n", "-1.5", "1e3", "1_0.5", "1.2.3", "inf", "NaN", "1,5"]
)
def test_it_reads_nothing_else_as_a_number(text):
    assert ascii_decimal(text) is None


def test_it_takes_a_minus_only_when_asked():
    assert (ascii_count("-3", signed=True), ascii_count("-3"), ascii_count("--3", signed=True)) == (-3, None, None)


def test_it_quotes_a_long_value_cut_short():
    assert shown("abc") == "'abc'"
    assert shown("9" * 5000) == "'" + "9" * 38 + "…"


@pytest.mark.parametrize(
    ("forwarded", "client"),
    [
        ("203.0.113.5:8080", "203.0.113.5"),
        ("203.0.113.5:²", None),
        ("203.0.113.5:١٢", None),
        ("203.0.113.5", "203.0.113.5"),
    ],
)
def test_it_reads_a_proxy_s_port_only_in_ascii_digits(settings, forwarded, client):
    settings.E31_TRUSTED_PROXIES = 1
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == client


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"), ("+1+1", "'+1+1"), ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("\r=1", "'\r=1"),
        ("-3.60", "-3.60"), ("+2", "+2"), ("-.5", "-.5"), ("refund", "refund"), ("", ""), (-3, -3), (None, None),
    ],
)  # fmt: skip
def test_a_csv_cell_that_a_spreadsheet_reads_as_a_formula_is_guarded_and_numbers_stay(value, written):
    assert csv_cell(value) == written
