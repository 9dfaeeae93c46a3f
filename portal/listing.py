"""Long lists on a page (the jobs, the ledger): one page of rows at a time, filtered as the query string asks.

The query string is read strictly but never refused: a value that means nothing (`page=abc`, `month=2026-13`,
`state=bogus`) is set aside with a sentence the page shows above the list, and the list is shown without it.
The pager's links carry only the filters that were kept."""

from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import QueryDict

from portal.text import ascii_count, clean_name, shown

PER_PAGE = 50
MONTH_FORMAT = "YYYY-MM"


@dataclass(frozen=True)
class Month:
    """A calendar month in UTC, as a half-open range of instants: [start, end)."""

    text: str
    start: datetime
    end: datetime


def month_of(text: str) -> Month | None:
    """`YYYY-MM` in ASCII digits as a Month; None for anything else (2026-13, 2026-1, ２０２６-01)."""
    year, _, month = text.partition("-")
    if len(year) != 4 or len(month) != 2:
        return None
    year, month = ascii_count(year), ascii_count(month)
    if year is None or month is None:
        return None
    try:
        start = datetime(year, month, 1, tzinfo=UTC)
        return Month(text, start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC))
    except ValueError:  # month 0 or 13, year 0, or December 9999 (it ends past the calendar)
        return None


class ListQuery:
    """What a list page was asked for: each reader takes one parameter, keeps it when it means something, and
    otherwise says why it was set aside (`notes`)."""

    def __init__(self, params: QueryDict):
        self.params = params
        self.kept: dict[str, str] = {}
        self.set_aside: list[tuple[str, str]] = []  # (what was wrong, what the page shows instead)

    def _set_aside(self, problem: str, instead: str) -> None:
        self.set_aside.append((problem, instead))

    @property
    def notes(self) -> list[str]:
        """What a page says above its list: each value set aside, and what it shows instead."""
        return [f"{problem}; {instead}." for problem, instead in self.set_aside]

    @property
    def problems(self) -> str:
        """What was wrong with the query string, for an answer that cannot show a list without it (an export)."""
        return " ".join(f"{problem}." for problem, _ in self.set_aside)

    def _raw(self, name: str) -> str:
        return self.params.get(name, "").strip()

    def choice(self, name: str, choices: dict[str, str], what: str) -> str:
        """One of `choices` (value: label), or "" when none was asked or the value is none of them."""
        value = self._raw(name)
        if value and value not in choices:
            self._set_aside(f"There is no {what} {shown(value)}", f"showing every {what}")
            return ""
        if value:
            self.kept[name] = value
        return value

    def month(self, name: str = "month") -> Month | None:
        value = self._raw(name)
        if not value:
            return None
        found = month_of(value)
        if found is None:
            self._set_aside(f"{shown(value)} is not a month ({MONTH_FORMAT})", "showing every month")
            return None
        self.kept[name] = value
        return found

    def number(self, name: str, what: str) -> int | None:
        """A whole number of at least 1 (an id), or None."""
        value = self._raw(name).removeprefix("#")
        if not value:
            return None
        found = ascii_count(value)
        if not found:
            self._set_aside(f"{shown(value)} is not a {what} number", f"showing every {what}")
            return None
        self.kept[name] = str(found)
        return found

    def text(self, name: str, max_length: int = 100) -> str:
        """A line of search text, cleaned as a name is and cut to `max_length`."""
        value = clean_name(self.params.get(name, ""))[:max_length]
        if value:
            self.kept[name] = value
        return value

    def page(self, rows: QuerySet, per_page: int = PER_PAGE) -> Page:
        """The page of `rows` asked for: the first when the number is not one, the last when it is past it."""
        paginator = Paginator(rows, per_page)
        value = self._raw("page")
        number = ascii_count(value) if value else 1
        if not number:
            self._set_aside(f"There is no page {shown(value)}", "showing the first")
            number = 1
        elif number > paginator.num_pages:
            pages = f"{paginator.num_pages} page{'s' if paginator.num_pages != 1 else ''}"
            self._set_aside(f"There {'are' if paginator.num_pages != 1 else 'is'} only {pages}", "showing the last")
            number = paginator.num_pages
        return paginator.page(number)

    def url(self, **changes) -> str:
        """This list's query string with the filters kept, and `changes` (a page number) on top."""
        return "?" + urlencode({**self.kept, **{key: value for key, value in changes.items() if value is not None}})


@dataclass(frozen=True)
class Pager:
    """A page's links to the first, previous, next and last pages (None where there is none)."""

    page: Page
    first: str | None
    previous: str | None
    next: str | None
    last: str | None


def pager(query: ListQuery, page: Page) -> Pager:
    last = page.paginator.num_pages
    return Pager(
        page=page,
        first=query.url(page=1) if page.number > 1 else None,
        previous=query.url(page=page.previous_page_number()) if page.has_previous() else None,
        next=query.url(page=page.next_page_number()) if page.has_next() else None,
        last=query.url(page=last) if page.number < last else None,
    )
