"""Writes examples/customers.csv: a raw customer dump with the usual dirt, for a first clean-table job.

    python examples/generate.py [ROWS] [PATH]

Deterministic (seeded). Besides clean rows it has padded and decomposed-Unicode names, empty cells,
quoted notes with commas and newlines, a few malformed numbers and rows with a field missing.
"""

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


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    path = sys.argv[2] if len(sys.argv) > 2 else "examples/customers.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["id", "name", "email", "signup_date", "last_seen", "lifetime_value", "active", "country", "notes"]
        )
        writer.writerows(rows(count, random.Random(31)))


if __name__ == "__main__":
    main()
