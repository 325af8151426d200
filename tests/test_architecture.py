"""The house plan holds: floors that import only downward, no import circle, no side door
dodged by an import inside a function, and no function too long to read (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "hermes_keeper"

#: Lowest first. A module may import its own floor or any lower one, never a higher one.
FLOORS = (
    ("errors", "interrupt", "units", "fs", "place", "journal", "lock", "sqlite"),
    ("model", "hermes_config", "kept", "facts"),
    (
        "archive.payload",
        "archive.store",
        "archive.index",
        "archive.query",
        "archive.hermes_import",
        "backup",
        "offsite",
    ),
    ("run", "archive"),
    ("report", "report_types", "check", "history", "metrics", "report_html", "demo", "fleet"),
    ("home",),
    ("cli", "schedule", "__main__"),
)
#: Imports of the package's own modules inside a function, and why each is there.
LAZY_IMPORTS = {
    ("cli", "hermes_keeper.cli.text"): "only on the error path: rich is not cheap to import",
    ("cli.options", "hermes_keeper.cli.text"): "only on a profile's failure line: rich is not cheap",
    ("cli.options", "hermes_keeper.metrics"): "prometheus_client is imported only with --textfile",
}
MAX_LINES, MAX_PARAMS = 80, 7
#: Functions allowed past those limits, and why.
LONG_OR_WIDE: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _target(name: str, node: ast.ImportFrom | ast.Import, alias: ast.alias) -> str | None:
    """The package module an import names (``""`` is the package itself), else None."""
    if isinstance(node, ast.Import):
        full = alias.name
    else:
        if node.level:
            pkg = name.split(".") if MODULES[name].name == "__init__.py" else name.split(".")[:-1]
            base = ".".join(["hermes_keeper", *pkg[: len(pkg) - node.level + 1]])
            full = f"{base}.{node.module}" if node.module else base
        else:
            full = node.module or ""
        if f"{full}.{alias.name}".removeprefix("hermes_keeper.") in MODULES:
            full = f"{full}.{alias.name}"
    if full != "hermes_keeper" and not full.startswith("hermes_keeper."):
        return None
    mod = full.removeprefix("hermes_keeper").lstrip(".")
    return mod if mod in MODULES else None


def _imports() -> list[tuple[str, str, bool]]:
    """(importer, imported, inside a function) for every import of one package module by another."""
    out = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nested = {
            id(n)
            for f in ast.walk(tree)
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    target = _target(name, node, alias)
                    if target is not None and target not in ("", name):
                        out.append((name, target, id(node) in nested))
    return out


def floor(module: str) -> int:
    places = [(i, p) for i, names in enumerate(FLOORS) for p in names]
    best = max(
        ((i, len(p)) for i, p in places if module == p or module.startswith(p + ".")),
        key=lambda x: x[1],
        default=None,
    )
    assert best is not None, f"{module} has no floor in FLOORS (add it where it belongs)"
    return best[0]


def test_every_module_has_a_floor():
    for module in MODULES:
        if module:
            floor(module)


def test_imports_only_run_downward():
    up = [f"{a} -> {b}" for a, b, _ in _imports() if a and floor(b) > floor(a)]
    assert up == []


def test_no_import_circle():
    edges: dict[str, set[str]] = {}
    for a, b, _ in _imports():
        edges.setdefault(a, set()).add(b)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            pytest.fail("import circle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for module in sorted(edges):
        visit(module, [])


def test_no_import_inside_a_function_without_a_reason():
    lazy = {(a, f"hermes_keeper.{b}") for a, b, inside in _imports() if inside}
    assert lazy == set(LAZY_IMPORTS)


def _click_command(fn: ast.FunctionDef) -> bool:
    """A click command takes its options as parameters: their number is the command's."""
    return any("command" in ast.unparse(d) or "group" in ast.unparse(d) for d in fn.decorator_list)


def test_no_function_too_long_or_too_wide():
    found = {}
    for name, path in MODULES.items():
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or _click_command(fn):
                continue
            a = fn.args
            params = len(a.posonlyargs + a.args + a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
            params -= bool(a.args) and a.args[0].arg in ("self", "cls")
            lines = fn.end_lineno - fn.lineno + 1
            if lines > MAX_LINES or params > MAX_PARAMS:
                found[f"{name}.{fn.name}"] = f"{lines} lines, {params} parameters"
    assert set(found) == set(LONG_OR_WIDE), found
