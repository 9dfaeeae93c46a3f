"""What a browser test checks of every page a person sees on its way, and the screenshots it takes of them for
docs/screenshots/ when E31_SCREENSHOTS names a folder (docs/screenshots/take.py sets it).

Each page is looked at as on a laptop (1280 px) and on a phone (390 px), in light and dark mode, and every
amount on it must be written the one way (1,234.56 USD). On the phone
nothing may stick out sideways, since what sticks out is cut off or drags the whole page left and right, and no
cell of a portal page's table may lie off the screen in a box that scrolls; on the laptop nothing scrolls
sideways at all."""

import os
import re
from pathlib import Path

from PIL import Image

LAPTOP, PHONE, HEIGHT = 1280, 390, 800
# The variants shot of each page: the file name's ending, the width, the colour scheme.
VARIANTS = [("", LAPTOP, "light"), ("-phone", PHONE, "light"), ("-dark", LAPTOP, "dark")]
# A full page taller than this is cut here: the top of a long page shows what it is.
MOST_HEIGHT = 2400

# Where the page is wider than the window: the elements that reach past its right edge, deepest first, named by
# tag, id and class. Read by evaluate, which the page's Content-Security-Policy leaves alone.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth <= width) return [];
  const wide = [...document.querySelectorAll("body *")].filter((element) => {
    const box = element.getBoundingClientRect();
    if (box.right <= width + 1 || box.width === 0) return false;
    for (let up = element.parentElement; up; up = up.parentElement) {
      if (getComputedStyle(up).overflowX !== "visible") return false;  // it scrolls inside a box of its own
    }
    return true;
  });
  const innermost = wide.filter((e) => !wide.some((inner) => inner !== e && e.contains(inner)));
  return innermost.map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + " " + e.className).slice(0, 5);
}"""


# The table cells of the portal's pages that lie off the screen, where a phone's reader would not find them: a
# table there shows what it is read by whole. (The operators' console, the stock admin, scrolls its lists.)
CELLS_OFF_SCREEN = """() => {
  if (document.getElementById("container")) return [];  // the admin's own layout
  return [...document.querySelectorAll("td, th")].filter((cell) => {
    const box = cell.getBoundingClientRect();
    return box.width > 0 && (box.right > document.documentElement.clientWidth + 1 || box.left < 0);
  }).map((cell) => cell.textContent.trim()).slice(0, 5);
}"""

# The boxes that scroll sideways: none should on a laptop's screen.
SCROLLING = """() => [...document.querySelectorAll("body *")].filter((element) => {
  const style = getComputedStyle(element);
  return ["auto", "scroll"].includes(style.overflowX) && element.scrollWidth > element.clientWidth + 1;
}).map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + " " + e.className)"""


# An amount as a person reads it, everywhere: two decimals, thousands grouped, the currency after (1,234.56 USD,
# or < 0.01 USD); a rate ("2.50 USD per GPU-hour") may show its last decimal.
AMOUNT = re.compile(r"(< )?(\S+)[ \u00a0](?:USD|EUR|GBP)\b(?!\s+per\b)")  # a cell's edge (a tab) is not one
IN_ONE_FORMAT = re.compile(r"\d{1,3}(,\d{3})*\.\d{2}")


def amounts_not_in_one_format(text: str) -> list[str]:
    """The amounts in a page's text that are not written the one way."""
    return [match[0] for match in AMOUNT.finditer(text) if not IN_ONE_FORMAT.fullmatch(match[2].strip("(:"))]


def folder() -> Path | None:
    where = os.environ.get("E31_SCREENSHOTS")
    return Path(where) if where else None


def look(page, name: str) -> None:
    """Check the page as a person sees it on a phone, and shoot it in each variant where screenshots are asked
    for. The page is left as it was found: light, laptop-wide."""
    shots = folder()
    # A look right after a click that navigates: on a loaded machine the next page may not be there yet.
    page.wait_for_selector("body", state="attached")
    page.wait_for_load_state()
    odd = amounts_not_in_one_format(page.inner_text("body"))
    assert not odd, f"{name}: amounts not written as 1,234.56 USD: {odd}"
    try:
        for ending, width, scheme in VARIANTS:
            page.set_viewport_size({"width": width, "height": HEIGHT})
            page.emulate_media(color_scheme=scheme)
            if width == PHONE:
                assert not (wide := page.evaluate(OVERFLOW)), f"{name}: wider than a phone's {PHONE} px: {wide}"
                assert not (off := page.evaluate(CELLS_OFF_SCREEN)), f"{name}: cells off a phone's screen: {off}"
            else:
                assert not (boxes := page.evaluate(SCROLLING)), f"{name}: scrolls sideways at {width} px: {boxes}"
            if shots:
                shoot(page, shots / f"{name}{ending}.png")
    finally:
        page.set_viewport_size({"width": LAPTOP, "height": HEIGHT})
        page.emulate_media(color_scheme="light")


def shoot(page, path: Path) -> None:
    """A full-page PNG, cut at MOST_HEIGHT and reduced to 256 colours: a screenshot of text and flat colours
    loses nothing a reader sees, and weighs a third."""
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True, animations="disabled", caret="hide")
    with Image.open(path) as image:
        image = image.crop((0, 0, image.width, min(image.height, MOST_HEIGHT))).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
