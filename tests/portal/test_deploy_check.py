"""Production settings: `manage.py check --deploy` finds nothing to warn about, and the answers carry HSTS,
the HTTPS redirect, secure cookies and a Content-Security-Policy that allows nothing inline."""

import json
import secrets
import subprocess
import sys

from tests.settings import ROOT

# What an operator's environment holds behind one HTTPS proxy; the database is a file under the var folder.
PRODUCTION = {
    "E31_HTTPS": "true",
    "E31_TRUSTED_PROXIES": "1",
    "E31_DEBUG": "false",
    "E31_ALLOWED_HOSTS": "portal.example.com",
}

PROBE = """
import json
from django.test import Client
page = Client().get("/design-partners/apply/", secure=True, HTTP_HOST="portal.example.com")
plain = Client().get("/design-partners/apply/", HTTP_HOST="portal.example.com")
print(json.dumps({
    "status": page.status_code,
    "hsts": page.get("Strict-Transport-Security"),
    "csp": page.get("Content-Security-Policy"),
    "cookie_secure": bool(page.cookies["csrftoken"]["secure"]),
    "plain": [plain.status_code, plain.get("Location")],
}))
"""


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {"PATH": "/usr/bin:/bin", "E31_SECRET_KEY": secrets.token_urlsafe(50), **PRODUCTION, **env}
    command = [sys.executable, "manage.py", *args]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, check=False, timeout=120)


def test_it_passes_the_deployment_check_without_a_warning(tmp_path):
    result = run("check", "--deploy", "--fail-level", "WARNING", E31_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_it_answers_over_https_with_hsts_secure_cookies_and_a_strict_policy(tmp_path):
    run("migrate", "-v", "0", E31_VAR_DIR=str(tmp_path))
    result = run("shell", "-c", PROBE, E31_VAR_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["status"] == 200
    assert found["hsts"] == "max-age=31536000; includeSubDomains; preload"
    assert found["cookie_secure"]
    assert found["plain"] == [301, "https://portal.example.com/design-partners/apply/"]
    policy = dict(part.strip().split(" ", 1) for part in found["csp"].split(";"))
    assert policy["script-src"] == policy["style-src"] == policy["default-src"] == "'self'"
    assert "unsafe-inline" not in found["csp"] and "unsafe-eval" not in found["csp"]


def test_it_takes_the_hsts_time_the_operator_sets_and_refuses_it_without_https(tmp_path):
    run("migrate", "-v", "0", E31_VAR_DIR=str(tmp_path))
    short = run("shell", "-c", PROBE, E31_VAR_DIR=str(tmp_path), E31_HSTS_SECONDS="300")
    assert json.loads(short.stdout.strip().splitlines()[-1])["hsts"] == "max-age=300; includeSubDomains; preload"
    refused = run("check", E31_VAR_DIR=str(tmp_path), E31_HSTS_SECONDS="300", E31_HTTPS="false")
    assert refused.returncode != 0
    assert "E31_HSTS_SECONDS needs E31_HTTPS" in refused.stderr
