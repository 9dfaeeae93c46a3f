"""The client stands alone: it imports nothing of Django or the portal, and the portal nothing of it."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
CLIENT = ROOT / "client" / "src" / "e31"
PORTAL = ("django", "portal", "jobs", "billing", "api", "tests", "celery")


def imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found


def test_it_imports_nothing_of_the_portal():
    modules = sorted(CLIENT.rglob("*.py"))
    assert len(modules) > 5
    for path in modules:
        assert not imported(path) & set(PORTAL), f"{path.name} imports {imported(path) & set(PORTAL)}"


def test_the_portal_imports_nothing_of_it():
    for package in ("portal", "jobs", "billing", "api"):
        for path in (ROOT / package).rglob("*.py"):
            assert "e31" not in imported(path), f"{path} imports e31"


def test_the_portals_requirements_leave_it_out():
    assert "e31" not in (ROOT / "requirements.txt").read_text()
    assert "-e ./client" in (ROOT / "requirements-dev.txt").read_text().splitlines()
