"""Writes a raw customer dump with the usual dirt, for a first clean-table job (examples/customers.csv).

    python examples/generate.py PATH [--rows ROWS] [--force]

An existing file is kept unless --force says to write over it. Deterministic (seeded). Besides clean
rows it has padded and decomposed-Unicode names, empty cells, quoted notes with commas and newlines, a
few malformed numbers and rows with a field missing.
"""

import argparse
import csv
import random
import sys
import unicodedata
from datetime import UTC, datetime, timedelta

FIRST = ["Ana", "Björn", "Chloé", "Dmitri", "Émilie", "Farah", "Günter", "Hiro", "Inès", "José", "Kai", "Łukasz"]
LAST = ["Álvarez", "Brown", "Çelik", "Dubois", "Eriksen", "Fernández", "García", "Holm", "Ivanova", "Jørgensen"]
COUNTRIES = ["DE", "FR", "ES", "SE", "PL", "JP", "US", "GB", "NO", "TR"]
NOTES = ["", "", "", "VIP", "prefers email, not phone", 'said "call back later"', "moved office\nnew address pending"]


def rows(count: int, rng: random.Random):
    start = datetime(2021, 1, 1, tzinfo=UTC)
    for number in range(1, count + 1):
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if number % 7 == 0:
            name = unicodedata.normalize("NFD", name)  # the same name, decomposed: clean-table makes it NFC
        if number % 11 == 0:
            name = f"  {name}  "
        signup = start + timedelta(days=rng.randrange(0, 1400))
        seen = signup + timedelta(seconds=rng.randrange(0, 90 * 86400))
        value = f"{rng.uniform(0, 5000):.2f}" if number % 13 else ""
        if number % 997 == 0:
            value = "n/a"  # cannot be a float: the record is rejected with its line number
        row = [
            str(number),
            name,
            f"customer{number}@example.com",
            signup.date().isoformat(),
            seen.isoformat().replace("+00:00", "Z"),
            value,
            rng.choice(["true", "false"]),
            rng.choice(COUNTRIES),
            rng.choice(NOTES),
        ]
        if number % 1499 == 0:
            row = row[:-1]  # a field missing: rejected, with the line it starts on
        yield row


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Write a raw customer dump (CSV) for a first clean-table job.")
    parser.add_argument("path", help="the CSV file to write, e.g. examples/customers.csv")
    parser.add_argument("--rows", type=int, default=5000, help="customer rows to write (default 5000)")
    parser.add_argument("--force", action="store_true", help="write over the file if it exists")
    options = parser.parse_args(argv)
    if options.rows < 0:
        parser.error(f"--rows must be 0 or more, not {options.rows}")
    return options


def main(argv: list[str] | None = None) -> None:
    options = arguments(argv)
    # "x" refuses an existing file in the same call that creates it: no window for another writer.
    try:
        handle = open(options.path, "w" if options.force else "x", newline="", encoding="utf-8")  # noqa: SIM115
    except FileExistsError:
        sys.exit(f"{options.path} exists; give --force to write over it.")
    except OSError as error:
        sys.exit(f"Cannot write {options.path}: {error.strerror}.")
    with handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["id", "name", "email", "signup_date", "last_seen", "lifetime_value", "active", "country", "notes"]
        )
        writer.writerows(rows(options.rows, random.Random(31)))


if __name__ == "__main__":
    main()
