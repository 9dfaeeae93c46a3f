"""Fixtures of staging's tests."""

import pytest

from jobs.staging import fastcsv


@pytest.fixture
def small_blocks(monkeypatch):
    """Many blocks, even for small data, so records cross the scan's block boundaries."""
    monkeypatch.setattr(fastcsv, "MIN_BLOCK", 1024)
    monkeypatch.setattr(fastcsv, "SCAN_BLOCK", 4096)
    monkeypatch.setattr(fastcsv, "MAX_BLOCK", 8192)  # and records parsed in many pieces
