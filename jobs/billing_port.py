"""What the engine asks of billing, without importing it: the rate in force, an organisation's retention
limits and its spend this month, what a job has cost, and its ledger lines for the manifest and `submit`.
Billing answers (billing/answers.py) and registers itself here when Django starts (billing/apps.py), so
billing reads jobs and jobs tells billing through signals: the arrows between the two apps run one way."""

from collections.abc import Iterable
from decimal import Decimal
from typing import Protocol

from django.core.exceptions import ImproperlyConfigured

from jobs.models import Allocation, Job
from portal.models import Organisation


class Rate(Protocol):
    """A rate card in force: what an estimate's GPU-hours would cost."""

    currency: str

    def price(self, gpu_hours: Decimal) -> Decimal: ...


class RetentionLimits(Protocol):
    """The operators' limits on the days a job keeps its staged copy and its output."""

    max_staged_days: int
    output_days: int
    max_output_days: int


class Meter(Protocol):
    """A job's hold priced: so far while it runs, as its ledger entry once released."""

    gpus: int
    seconds: int
    gpu_hours: Decimal
    rate: Decimal
    currency: str
    amount: Decimal


class Charged(Protocol):
    """What a job was charged in one currency, and what that is made of."""

    currency: str
    amount: Decimal

    @property
    def parts(self) -> list[tuple[str, Decimal]]: ...


class Billing(Protocol):
    def rate_in_force(self) -> Rate | None: ...

    def retention_limits(self, organisation: Organisation) -> RetentionLimits: ...

    def meter(self, job: Job) -> Meter | None: ...

    def holds_meter(self, allocations: Iterable[Allocation]) -> Meter | None: ...

    def charged(self, job: Job) -> list[Charged]: ...

    def ledger_lines(self, job: Job) -> list[dict]: ...

    def hold_line(self, job: Job) -> dict: ...

    def ledger_head(self, organisation: Organisation) -> dict: ...

    def month_committed(self, organisation: Organisation) -> Decimal: ...


_registered: dict[str, Billing] = {}


def register(answers: Billing) -> None:
    _registered["billing"] = answers


def billing() -> Billing:
    try:
        return _registered["billing"]
    except KeyError:
        raise ImproperlyConfigured("jobs needs the billing app: it registers its answers when ready") from None
