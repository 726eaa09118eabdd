"""One owner per record: each of a ``Replica``'s records has the one writer
``proxy/fleet/replica.py``'s docstring names, and nothing in ``proxy/`` attaches a collaborator
or a callable to another object after its construction.

The scans read every module of ``proxy/``: an assignment to an attribute of anything but
``self`` (``replica.standing.health = ...``, ``slots.inflight += 1``, ``x.hook = f``), a
``setattr`` on one, and every change of a replica's ``adapters`` dict.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from proxy.fleet.replica import Replica, Slots, Standing

PACKAGE = Path(__file__).resolve().parents[2] / "proxy"
WRITERS = {
    **{f.name: {"proxy/fleet/pool.py"} for f in dataclasses.fields(Standing)},
    **{f.name: {"proxy/dataplane/limiter.py"} for f in dataclasses.fields(Slots)},
    "error_streak": {"proxy/fleet/outliers.py"},
    "gateway_streak": {"proxy/fleet/outliers.py"},
    "reported": {"proxy/fleet/load.py"},
    "listing": {"proxy/fleet/info.py"},
    "adapters": {"proxy/adapters/status.py"},
    "digests": {"proxy/adapters/status.py"},
    "standing": set(),  # made with the replica, never replaced
    "slots": set(),
}
# Plain state written on another object by that object's owner (each one checked: a value, never
# a collaborator or a callable). Anything else assigned to another object's attribute fails.
PLAIN_STATE = {
    ("proxy/adapters/mirror.py", "ok"),  # the mirror's own copy job: landed or not
    ("proxy/adapters/service.py", "max_loras"),  # the service writes its registry
    ("proxy/dataplane/answers.py", "suspects"),  # the forwarder's own exchange
    ("proxy/dataplane/limiter.py", "run"),  # the limiter's placement: whose slot it holds
    ("proxy/http/handlers.py", "body"),  # an aiohttp answer being built
    ("proxy/logs.py", "exc_text"),  # a logging record being redacted
    ("proxy/logs.py", "msg"),
    ("proxy/logs.py", "args"),
    ("proxy/runs/table.py", "weight"),  # the runs table writes its runs
    ("proxy/upstream/client.py", "check_hostname"),  # an ssl context being made
    ("proxy/upstream/client.py", "verify_mode"),
    ("proxy/upstream/connpool.py", "idle_since"),  # the connection pool's idle connection
}
MUTATORS = {"pop", "clear", "update", "setdefault", "popitem"}


def _not_self(node: ast.expr) -> bool:
    return not (isinstance(node, ast.Name) and node.id == "self")


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return []
    for target in targets:
        if isinstance(target, ast.Tuple):
            targets.extend(target.elts)
    return targets


def attached(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """(attribute, value) for each assignment to an attribute of an object other than
    ``self``, and each ``setattr`` on one."""
    found: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        for target in _targets(node):
            if isinstance(target, ast.Attribute) and _not_self(target.value):
                found.append((target.attr, getattr(node, "value", node)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and node.args
            and _not_self(node.args[0])
        ):
            found.append(("setattr", node))
    return found


def _callable(value: ast.AST) -> bool:
    """A lambda, or one of this object's own attributes handed over (a bound method, a
    collaborator): what wiring by attachment looks like (``registry.scope_of = self._scope``)."""
    if isinstance(value, ast.Lambda):
        return True
    return isinstance(value, ast.Attribute) and not _not_self(value.value)


def writes(tree: ast.AST) -> set[str]:
    """The replica record fields this module writes on objects other than ``self``."""
    found = {attr for attr, _ in attached(tree) if attr in WRITERS}
    for node in ast.walk(tree):
        for target in _targets(node):
            if isinstance(target, ast.Subscript) and _adapters_of_another(target.value):
                found.add("adapters")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and _adapters_of_another(node.func.value)
        ):
            found.add("adapters")
    return found


def _adapters_of_another(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "adapters" and _not_self(node.value)


def _modules() -> list[tuple[str, ast.AST]]:
    return [
        (path.relative_to(PACKAGE.parent).as_posix(), ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_each_replica_record_is_written_by_its_one_writer() -> None:
    assert {f.name for f in dataclasses.fields(Replica)} - {"id", "url"} <= WRITERS.keys()
    wrong = [
        f"{module} writes Replica's {name}"
        for module, tree in _modules()
        for name in writes(tree)
        if module not in WRITERS[name]
    ]
    assert not wrong, wrong


def test_nothing_is_attached_to_another_object_after_its_construction() -> None:
    wrong = []
    for module, tree in _modules():
        for attr, value in attached(tree):
            if attr in WRITERS:
                continue  # a replica record: its writer is checked above
            if (module, attr) not in PLAIN_STATE or _callable(value):
                wrong.append(f"{module}: .{attr} = {ast.unparse(value)[:60]}")
    assert not wrong, wrong


def test_the_scans_see_writes_and_attachments_through_other_objects() -> None:
    code = (
        "def f(r, p, s):\n    r.standing.health = 1\n    p.replica.slots.cost += 2\n"
        "    r.adapters.pop('x')\n    s.on_change = self.wake\n    setattr(s, 'x', 1)\n"
    )
    tree = ast.parse(code)
    assert writes(tree) == {"health", "cost", "adapters"}
    assert [(a, _callable(v)) for a, v in attached(tree) if a not in WRITERS] == [
        ("on_change", True),
        ("setattr", False),
    ]
    assert writes(ast.parse("class A:\n    def f(self):\n        self.inflight = 0\n")) == set()
