"""The colours the pages write text in, against the backgrounds they write it on, at WCAG AA (4.5:1) in the
light scheme and the dark: read from static/css/portal.css, so a colour changed there is checked here."""

import re

import pytest

from tests.support import ROOT

CSS = (ROOT / "static" / "css" / "portal.css").read_text()
# Text colour on background: the state badges, the warnings on cards, muted text on cards and badges.
PAIRS = [
    ("warn", "tint-warn"), ("warn", "card"), ("queued", "tint-queued"), ("run", "tint-run"), ("ok", "tint-ok"),
    ("ok", "card"), ("bad", "tint-bad"), ("bad", "card"), ("muted", "soft"), ("muted", "card"), ("ink", "bg"),
]  # fmt: skip


def schemes() -> dict[str, dict[str, str]]:
    """The light scheme's variables, and the dark scheme's (the light ones it leaves as they are)."""
    light_block = re.search(r"^:root \{(.*?)\n\}", CSS, re.S | re.M)[1]
    dark_block = re.search(r"prefers-color-scheme: dark\) \{\s*:root \{(.*?)\}", CSS, re.S)[1]
    light = colours_in(light_block)
    return {"light": light, "dark": {**light, **colours_in(dark_block)}}


def colours_in(block: str) -> dict[str, str]:
    """Each variable set to a colour, as #rrggbb (#fff read as #ffffff)."""
    found = re.findall(r"--([\w-]+):\s*#([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b", block)
    return {name: "#" + (value if len(value) == 6 else "".join(c * 2 for c in value)) for name, value in found}


def luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(one: str, other: str) -> float:
    lighter, darker = sorted((luminance(one), luminance(other)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_reads_at_aa_on_every_background_it_is_written_on(scheme):
    colours = schemes()[scheme]
    low = {
        f"--{text} on --{background}": round(contrast(colours[text], colours[background]), 2)
        for text, background in PAIRS
        if contrast(colours[text], colours[background]) < 4.5
    }
    assert not low, f"below 4.5:1 in the {scheme} scheme: {low}"
