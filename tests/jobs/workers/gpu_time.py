"""GPU time as the ledger bills it: each hold by the started second, in hours to six places."""

import math
from decimal import Decimal


def gpu_seconds(allocations) -> int:
    return sum(math.ceil((a.held_to - a.held_from).total_seconds()) for a in allocations)


def as_gpu_hours(seconds: int) -> Decimal:
    return (Decimal(seconds) / 3600).quantize(Decimal("0.000001"))
