"""transformers' tables of architectures by name, read from its source without importing it.

`transformers.models.auto.modeling_auto` refuses to be imported where torch is not installed (transformers 5
raises "modeling_auto requires PyTorch"), and the portal runs without torch: only the GPU workers have it. Its
`*_MAPPING_NAMES` tables are literals (model type → class name, or a tuple of names), some built from others
by unpacking, so they are read here from the module's source with `ast`: nothing of the module is run, and
the tables are exactly those of the installed version. (configuration_auto imports without torch.)
"""

import ast
import importlib.util
from functools import cache
from pathlib import Path


class TablesUnreadable(Exception):
    """The installed transformers' modeling_auto.py is not laid out as this reader expects."""


def _source(module: str) -> str:
    package = importlib.util.find_spec("transformers")
    if package is None or not package.submodule_search_locations:
        raise TablesUnreadable("transformers is not installed")
    path = Path(package.submodule_search_locations[0], *module.split(".")[1:]).with_suffix(".py")
    return path.read_text(encoding="utf-8")


def _pairs(node: ast.expr, tables: dict[str, dict]) -> list[tuple]:
    """The (key, value) pairs of a table's literal: `OrderedDict([...])`, `{...}`, with `*list(T.items())` or
    `**T` of a table read before it."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"OrderedDict", "dict"}:
        pairs = [pair for argument in node.args for pair in _pairs(argument, tables)]
        for keyword in node.keywords:
            if keyword.arg is not None:
                raise TablesUnreadable(f"a keyword argument at line {node.lineno}")
            pairs += (
                _pairs(keyword.value, tables)
                if isinstance(keyword.value, ast.Dict)
                else list(_named_table(keyword.value, tables).items())
            )
        return pairs
    if isinstance(node, ast.List | ast.Tuple):
        pairs = []
        for element in node.elts:
            if isinstance(element, ast.Starred):
                pairs += list(_named_table(element.value, tables).items())
            else:
                pairs.append(tuple(_literal(element)))
        return pairs
    if isinstance(node, ast.Dict):
        pairs = []
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                pairs += list(_named_table(value, tables).items())
            else:
                pairs.append((_literal(key), _literal(value)))
        return pairs
    raise TablesUnreadable(f"an expression of kind {type(node).__name__} at line {node.lineno}")


def _literal(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise TablesUnreadable(f"an expression that is not a literal at line {node.lineno}") from None


def _named_table(node: ast.expr, tables: dict[str, dict]) -> dict:
    """A table named in another's literal: `T`, `T.items()` or `list(T.items())`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "items":
        node = node.func.value
    if isinstance(node, ast.Name) and node.id in tables:
        return tables[node.id]
    raise TablesUnreadable(f"a reference it cannot follow at line {node.lineno}")


@cache
def mapping_names(module: str) -> dict[str, dict]:
    """Every `*_MAPPING_NAMES` table assigned at the top of `module` (a module of transformers), by name."""
    return tables_in(_source(module), module)


def tables_in(source: str, module: str = "the source") -> dict[str, dict]:
    """Every `*_MAPPING_NAMES` table assigned at the top of this Python source, by name."""
    tables: dict[str, dict] = {}
    for statement in ast.parse(source).body:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        target = statement.targets[0]
        if isinstance(target, ast.Name) and target.id.endswith("_MAPPING_NAMES"):
            tables[target.id] = dict(_pairs(statement.value, tables))
    if not tables:
        raise TablesUnreadable(f"no *_MAPPING_NAMES table in {module}")
    return tables
