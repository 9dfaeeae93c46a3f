"""The billing tests' own fixtures."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def checkpoints(settings, tmp_path) -> Path:
    """The ledger's checkpoints in a folder of the test's own: the organisations of another test (rolled back,
    or flushed) had the same ids."""
    folder = tmp_path / "ledger-checkpoints"
    storage = {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": folder}}
    settings.STORAGES = {**settings.STORAGES, "ledger": storage}
    return folder
