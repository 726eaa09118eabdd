"""Each ``Replica`` field has the one writer ``proxy/fleet/replica.py``'s docstring names.

Every assignment in ``proxy/`` to an attribute named like a ``Replica`` field on anything but
``self`` (``replica.health = ...``, ``placed.replica.inflight += 1``), and every change of a
replica's ``adapters`` dict, must sit in that field's writer module.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from proxy.fleet.replica import Replica

PACKAGE = Path(__file__).resolve().parents[2] / "proxy"
POOL = "proxy/fleet/pool.py"
WRITERS = {
    "inflight": {"proxy/dataplane/limiter.py"},
    "cost": {"proxy/dataplane/limiter.py"},
    "error_streak": {"proxy/fleet/breaker.py"},
    "reported": {"proxy/fleet/load.py"},
}
FIELDS = {f.name for f in dataclasses.fields(Replica)} - {"id", "url"}
MUTATORS = {"pop", "clear", "update", "setdefault", "popitem"}


def _not_self(node: ast.expr) -> bool:
    return not (isinstance(node, ast.Name) and node.id == "self")


def _adapters_of_another(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "adapters" and _not_self(node.value)


def writes(tree: ast.AST) -> set[str]:
    """The ``Replica`` fields this module writes on objects other than ``self``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Tuple):
                targets.extend(target.elts)
            elif isinstance(target, ast.Subscript):  # replica.adapters[name] = path
                if _adapters_of_another(target.value):
                    found.add("adapters")
            elif (
                isinstance(target, ast.Attribute)
                and target.attr in FIELDS
                and _not_self(target.value)
            ):
                found.add(target.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and _adapters_of_another(node.func.value)
        ):
            found.add("adapters")
    return found


def test_each_replica_field_is_written_by_its_one_writer() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE.parent).as_posix()
        for name in writes(ast.parse(path.read_text(), str(path))):
            if module not in WRITERS.get(name, {POOL}):
                wrong.append(f"{module} writes Replica.{name}")
    assert not wrong, wrong


def test_the_scan_sees_a_write_through_another_object() -> None:
    code = "def f(r, p):\n    r.health = 1\n    p.replica.cost += 2\n    r.adapters.pop('x')\n"
    assert writes(ast.parse(code)) == {"health", "cost", "adapters"}
    assert writes(ast.parse("class A:\n    def f(self):\n        self.inflight = 0\n")) == set()
