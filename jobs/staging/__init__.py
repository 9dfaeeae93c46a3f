"""Staging: the dataset copied into job storage, checked, counted, described and cut into shards; and
the limits on a dataset's size, which uploads and S3 sources are held to as well, and on a model's."""

from django.conf import settings

from portal import units


def over_limit(what: str, size: int, limit: int, of: str) -> str:
    """Why `what`, of `size` bytes, is refused as `of` ("a dataset", "a model"): exact bytes, since rounded
    sizes can look equal."""
    return f"{what} is {size:,} bytes, more than the {limit:,}-byte ({units.limit(limit)}) limit for {of}."


def over_dataset_limit(what: str, size: int) -> str:
    return over_limit(what, size, settings.E31_MAX_DATASET_BYTES, "a dataset")
