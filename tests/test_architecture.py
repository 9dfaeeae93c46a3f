"""The layout holds: no import loop among the portal's modules, and the layers' contracts in pyproject.toml."""

import ast
from pathlib import Path

import pytest
from importlinter.cli import EXIT_STATUS_SUCCESS, lint_imports

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("jobs", "billing", "portal", "api")
CLIENT = ROOT / "client" / "src"  # the e31 client, a package of its own


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Each module of these packages, and the modules of theirs it imports, wherever in the file (under
    TYPE_CHECKING too). `from package import name` imports the package, whose __init__ runs, and the module
    `name` when it is one."""
    modules = {
        module_name(path, root): path
        for package in packages
        for path in (root / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[name] = {module for module in imported if module in modules and module != name}
    return graph


def loop_through(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop in the graph, as the modules along it, or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph[module]):
            found = visit(imported, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


def test_it_finds_a_loop_when_there_is_one():
    assert loop_through({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert loop_through({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_it_has_no_import_loop():
    graph = imports()
    assert "jobs.tasks" in graph and "jobs.lifecycle" in graph["jobs.tasks"]
    assert loop_through(graph) is None


def test_it_counts_a_packages_own_init_as_imported():
    graph = imports()
    assert "jobs.processors" in graph["jobs.staging.stage"], "from jobs.processors import ParamError"
    assert "jobs.processors.base" in graph["jobs.processors"]


def test_the_client_has_no_import_loop():
    graph = imports(CLIENT, ("e31",))
    assert "e31.upload" in graph["e31.client"]
    assert loop_through(graph) is None


def test_it_keeps_the_layers_contracts(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    status = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=str(tmp_path), no_logo=True)
    if status != EXIT_STATUS_SUCCESS:
        pytest.fail("lint-imports: a contract in pyproject.toml is broken (its output is above)")


def _timeline(target: ast.expr) -> bool:
    """Whether a call's target is a job's timeline (`job.events`, `JobEvent.objects`): its rows record a
    state, they do not change one."""
    names = {node.attr for node in ast.walk(target) if isinstance(node, ast.Attribute)}
    names |= {node.id for node in ast.walk(target) if isinstance(node, ast.Name)}
    return bool(names & {"events", "JobEvent"})


def state_writes(path: Path) -> list[int]:
    """The lines of a file that write a state: `.update(state=…)`, `.state = …`, `create(state=…)`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            writes = node.func.attr in ("update", "create", "bulk_create", "update_or_create", "get_or_create")
            if writes and not _timeline(node.func.value) and any(keyword.arg == "state" for keyword in node.keywords):
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Attribute) and target.attr == "state" for target in targets):
                lines.append(node.lineno)
    return lines


def test_it_changes_a_jobs_state_only_in_the_lifecycle():
    writers = {
        str(path.relative_to(ROOT)): lines
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and (lines := state_writes(path))
    }
    assert writers == {"jobs/lifecycle.py": writers["jobs/lifecycle.py"]}
