"""Staging: the dataset copied into job storage, checked, counted, described and cut into shards; and
the limit on a dataset's size, which uploads and S3 sources are held to as well."""

from django.conf import settings

from portal import units


def over_dataset_limit(what: str, size: int) -> str:
    """Why a dataset of `size` bytes is refused: exact bytes, since rounded sizes can look equal."""
    limit = settings.E31_MAX_DATASET_BYTES
    return f"{what} is {size:,} bytes, more than the {limit:,}-byte ({units.limit(limit)}) limit for a dataset."
