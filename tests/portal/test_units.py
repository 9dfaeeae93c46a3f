"""Sizes read the same on every page: decimal units, as MB/s, the per-GB rate and the upload page count."""

import pytest

from portal.units import limit, size


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (None, "–"),
        (0, "0\xa0bytes"),
        (1, "1\xa0byte"),
        (999, "999\xa0bytes"),
        (1000, "1.0\xa0kB"),
        (31_600_000, "31.6\xa0MB"),
        (999_949_999, "999.9\xa0MB"),
        (999_950_000, "1.0\xa0GB"),
        (50 * 1024**3, "53.7\xa0GB"),
        (2 * 10**15, "2.0\xa0PB"),
        (3 * 10**18, "3000.0\xa0PB"),
    ],
)
def test_sizes_are_shown_in_decimal_units(count, shown):
    assert size(count) == shown


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (50 * 1024**3, "50\xa0GiB"),
        (2 * 1024**3, "2\xa0GiB"),
        (512 * 10**6, "512\xa0MB"),
        (10**9, "1\xa0GB"),
        (64 * 1024, "64\xa0KiB"),
        (1536 * 1024**2, "1,536\xa0MiB"),
        (4 * 50 * 1024**3, "200\xa0GiB"),
        (5, "5\xa0bytes"),
        (1_234_567, "1.2\xa0MB"),
    ],
)
def test_a_limit_reads_in_the_unit_it_was_set_in(count, shown):
    assert limit(count) == shown
