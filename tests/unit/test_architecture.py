"""The shape of ``proxy/``: no import cycle, small modules, few modules at the top.

Every import statement counts: at module level, under ``if TYPE_CHECKING:``, inside functions.
``from pkg import name`` depends on ``pkg/__init__.py`` (and on ``pkg.name`` when that is a
module), and importing ``a.b.c`` depends on ``a`` and ``a.b`` too, because Python runs them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "proxy"
MAX_LINES = 400
MAX_TOP_MODULES = 10
# What each room may import from the rest of the proxy (its package docstring says the same).
# Everything points inwards: http -> dataplane -> adapters -> fleet -> upstream.
ALLOWED = {
    "routing": set(),
    "console": set(),
    "insight": {"clock"},
    "metrics": {"fleet"},
    "upstream": {"config"},
    "fleet": {"clock", "config", "upstream"},
    "adapters": {"clock", "config", "metrics", "fleet", "upstream"},
    "dataplane": {"clock", "config", "metrics", "routing", "fleet", "upstream"},
    "http": {
        "adapters",
        "clock",
        "config",
        "dataplane",
        "fleet",
        "insight",
        "logs",
        "metrics",
        "routing",
        "supervise",
        "upstream",
    },
}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _with_parents(name: str, known: dict[str, Path]) -> set[str]:
    """``name`` and each enclosing package, restricted to modules of the proxy."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known.keys()


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every proxy module that importing ``name`` runs, one import statement at a time."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _with_parents(alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found |= _with_parents(base, known)
            for alias in node.names:
                found |= _with_parents(f"{base}.{alias.name}", known)
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_from_package_import_counts_as_depending_on_the_package() -> None:
    known = _modules()
    views = _imports("proxy.http.handlers", PACKAGE / "http" / "handlers.py", known)
    assert {"proxy.fleet", "proxy.fleet.views"} <= views  # ``from proxy.fleet import views``


def test_no_import_cycle_in_proxy() -> None:
    known = _modules()
    graph = {name: _imports(name, path, known) for name, path in known.items()}
    assert _cycles(graph) == []


@pytest.mark.parametrize("name", sorted(_modules()))
def test_no_module_over_the_line_limit(name: str) -> None:
    lines = len(_modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (limit {MAX_LINES}): split it"


def _room(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_each_room_imports_only_what_its_rules_allow() -> None:
    known = _modules()
    for name, path in known.items():
        room = _room(name)
        if room not in ALLOWED:
            continue
        reached = {_room(t) for t in _imports(name, path, known)} - {room, ""}
        assert reached <= ALLOWED[room], f"{name} imports {sorted(reached - ALLOWED[room])}"


def test_few_modules_directly_in_proxy() -> None:
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_every_package_says_what_it_holds_and_may_import() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc and len(doc) > 100, f"{init} needs a docstring: contents, rules"
