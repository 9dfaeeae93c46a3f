"""Configuration from the environment: a wrong value stops the start-up with a clear message."""

import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_choice, env_int
from tests.settings import ROOT


def test_it_reads_booleans_and_refuses_anything_else(monkeypatch):
    monkeypatch.setenv("E31_FLAG", "yes")
    assert env_bool("E31_FLAG", False) is True
    monkeypatch.setenv("E31_FLAG", "Off")
    assert env_bool("E31_FLAG", True) is False
    monkeypatch.setenv("E31_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="E31_FLAG must be true or false, not 'maybe'"):
        env_bool("E31_FLAG", False)


@pytest.mark.parametrize(("raw", "message"), [("four", "a whole number, not 'four'"), ("0", "at least 1, not 0")])
def test_it_refuses_a_bad_number(monkeypatch, raw, message):
    monkeypatch.setenv("E31_CPU_SLOTS", raw)
    with pytest.raises(ImproperlyConfigured, match=message):
        env_int("E31_CPU_SLOTS", 4, minimum=1)


def test_it_refuses_an_unknown_choice(monkeypatch):
    monkeypatch.setenv("E31_STORAGE", "floppy")
    with pytest.raises(ImproperlyConfigured, match="E31_STORAGE must be one of filesystem, s3, not 'floppy'"):
        env_choice("E31_STORAGE", "filesystem", ("filesystem", "s3"))


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("E31_CPU_SLOTS", "lots", "E31_CPU_SLOTS must be a whole number"),
        ("REDIS_URL", "http://localhost", "REDIS_URL must start with redis://"),
        ("E31_STORAGE", "s3", "E31_STORAGE=s3 needs E31_S3_BUCKET"),
        ("E31_DEBUG", "sometimes", "E31_DEBUG must be true or false"),
        ("E31_LOGIN_FAILURE_LIMIT", "0", "E31_LOGIN_FAILURE_LIMIT must be at least 1"),
        ("E31_LOGIN_LOCKOUT_MINUTES", "a while", "E31_LOGIN_LOCKOUT_MINUTES must be a whole number"),
        ("E31_TRUSTED_PROXIES", "-1", "E31_TRUSTED_PROXIES must be at least 0"),
        ("E31_INTAKE_POSTS_PER_HOUR", "0", "E31_INTAKE_POSTS_PER_HOUR must be at least 1"),
        ("E31_HTTPS", "true", "E31_HTTPS is on: set E31_TRUSTED_PROXIES to the number of proxies"),
        ("E31_EMAIL_HOST", "smtp.example.com", "E31_EMAIL_HOST is set: set E31_PUBLIC_URL to the portal's address"),
        ("E31_PUBLIC_URL", "portal.example.com", "E31_PUBLIC_URL must be an http(s) address"),
        ("E31_LEDGER_KEY", "not-hex-" * 8, "E31_LEDGER_KEY must be hexadecimal digits"),
        ("E31_LEDGER_KEY", "ab" * 31, "E31_LEDGER_KEY must be at least 32 bytes (64 hex digits), not 31"),
        ("E31_DB_CONN_MAX_AGE", "forever", "E31_DB_CONN_MAX_AGE must be a whole number, not 'forever'"),
        ("E31_DB_CONN_MAX_AGE", "-1", "E31_DB_CONN_MAX_AGE must be at least 0"),
        ("E31_STATIC_FINDERS", "maybe", "E31_STATIC_FINDERS must be true or false"),
    ],
)
def test_it_stops_the_start_up_on_a_wrong_value(tmp_path, variable, value, message):
    env = {"PATH": "/usr/bin:/bin", "E31_VAR_DIR": str(tmp_path), variable: value}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert message in result.stderr
