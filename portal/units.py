"""Sizes, money and hours as the product shows them. Sizes in decimal units everywhere (MB/s, the per-GB
staging rate, the upload page's figures), so one file reads the same on every page and a ledger's
bytes times its rate is its amount: Django's filesizeformat counts in 1024s under the same names.
Amounts in cents with thousands separators and the currency after (1,234.56 USD), hours held to the
hundredth (1.25): pages, emails and the CLI alike; the exports keep the ledger's exact figures."""

from decimal import ROUND_HALF_UP, Decimal

UNITS = ("kB", "MB", "GB", "TB", "PB")
BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")  # only where a limit was set in them


def size(count: int | float | None) -> str:
    """999 bytes, 31.6 MB, 2.0 GB; a non-breaking space keeps the figure and its unit together."""
    if count is None:
        return "–"
    if abs(count) < 1000:
        return f"{int(count)}\xa0byte" + ("" if count == 1 else "s")
    scaled = float(count)
    for unit in UNITS[:-1]:
        scaled /= 1000
        if abs(scaled) < 999.95:
            return f"{scaled:.1f}\xa0{unit}"
    return f"{scaled / 1000:.1f}\xa0{UNITS[-1]}"


def limit(count: int) -> str:
    """A limit in the unit a round setting was given in, its figure whole: 50 GiB, 512 MB, 64 KiB (size()
    would read 50 GiB as 53.7 GB, a figure nobody set). A limit that is no whole number of any unit reads as
    size() reads it."""
    whole = [
        (count // base**power, unit)
        for base, units in ((1000, UNITS), (1024, BINARY_UNITS))
        for power, unit in enumerate(units, start=1)
        if count >= base**power and count % base**power == 0
    ]
    if not whole:
        return size(count)
    figure, unit = min(whole)
    return f"{figure:,}\xa0{unit}"


def gigabytes(count: int) -> str:
    """Bytes as the GB a per-GB rate prices (10⁹ bytes), to the byte: 0.535012."""
    return f"{Decimal(count) / 10**9:.9f}".rstrip("0").rstrip(".")


CENT = Decimal("0.01")


def hundredths(value: Decimal | float | int | str | None) -> str:
    """A figure to the hundredth with thousands separators: 1,234.56; under a hundredth, not 0: < 0.01."""
    if value is None or value == "":
        return "–"
    figure = Decimal(str(value))
    if figure and abs(figure) < CENT:
        return "< 0.01" if figure > 0 else "> -0.01"
    return f"{figure.quantize(CENT, ROUND_HALF_UP):,}"


def money(amount: Decimal | float | int | str | None, currency: str = "") -> str:
    """1,234.56 USD; a credit -3.60 USD; under a cent, < 0.01 USD."""
    if amount is None or amount == "":
        return "–"
    return f"{hundredths(amount)} {currency}".rstrip()


def price(per_unit: Decimal | str, currency: str) -> str:
    """A price per unit to its last significant decimal, at least cents, thousands separated: 3.60 USD,
    0.005 USD, 12.125 USD."""
    figure = Decimal(str(per_unit))
    shown = figure.quantize(CENT) if figure == figure.quantize(CENT) else figure.normalize()
    return f"{shown:,} {currency}"
