"""Read configuration from the environment through helpers that fail loudly on a wrong value."""

import os
import re

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {raw!r}")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_ints(name: str, default: str, *, minimum: int | None = None) -> list[int]:
    """Whole numbers separated by commas, each at least `minimum`."""
    raw = os.environ.get(name, default)
    items = [item.strip() for item in raw.split(",")]
    if not all(re.fullmatch(r"-?[0-9]+", item) for item in items):
        raise ImproperlyConfigured(f"{name} must be whole numbers separated by commas, not {raw!r}")
    values = [int(item) for item in items]
    if minimum is not None and any(value < minimum for value in values):
        raise ImproperlyConfigured(f"{name} must be numbers of at least {minimum}, not {raw!r}")
    return values


RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")


def env_rate(name: str, default: str) -> str:
    """A request rate as Django REST framework's throttles read it: a count per second, minute, hour or day."""
    value = os.environ.get(name, default)
    if not RATE.fullmatch(value):
        raise ImproperlyConfigured(f"{name} must be a count per period such as 120/min or 30/hour, not {value!r}")
    return value
