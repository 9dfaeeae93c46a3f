"""Sizes read the same on every page: decimal units, as MB/s, the per-GB rate and the upload page count."""

import pytest

from portal.units import size


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
