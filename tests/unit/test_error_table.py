"""The error table (``proxy.http.errors.ANSWERS``) walked: every domain error of the proxy has a
row, every row counts one label of the fixed set and has a test that provokes it through a real
proxy, and nothing in ``proxy/`` builds an error answer or counts a rejection beside it."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import proxy
import tests.integration.test_refusals_edge
import tests.integration.test_refusals_fleet
import tests.reliability.test_local_limits
from proxy.dataplane.limiter import Rejected
from proxy.errors import DomainError
from proxy.http.errors import ANSWERS, answer_for
from proxy.metrics.labels import REJECTION_REASONS
from tests.support.refusals import PROVOKED

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "proxy/http/errors.py"
PROVOKING = (
    tests.integration.test_refusals_edge,
    tests.integration.test_refusals_fleet,
    tests.reliability.test_local_limits,
)


def _domain_errors() -> set[type[DomainError]]:
    """Every ``DomainError`` class of ``proxy`` (each module imported), but private bases."""
    for module in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, todo = set(), [DomainError]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("proxy.") and not sub.__name__.startswith("_"):
                found.add(sub)
    return found


def _instance_reasons() -> set[str]:
    """The reasons the limiter gives its ``Rejected`` (one class, several causes)."""
    source = Path(importlib.import_module(Rejected.__module__).__file__ or "").read_text()
    return set(re.findall(r'Rejected\(\s*"(\w+)"', source))


def test_every_domain_error_of_the_proxy_has_a_row() -> None:
    for kind in _domain_errors():
        answer_for(kind)  # TypeError naming the class when none


def test_every_row_has_a_test_that_provokes_it() -> None:
    missing = sorted(kind.__name__ for kind in ANSWERS if kind not in PROVOKED)
    modules = [module.__name__ for module in PROVOKING]
    assert missing == [], f"rows no test of {modules} provokes (tests.support.refusals.provokes)"


def test_every_row_counts_one_label_of_the_fixed_set_and_every_label_is_used() -> None:
    used = set()
    for kind, answer in ANSWERS.items():
        assert not (kind.reason and answer.reason), f"{kind.__name__}: two reasons"
        reason = kind.reason or answer.reason
        if reason is None:
            assert kind is Rejected, f"{kind.__name__} counts no reason"
            used |= _instance_reasons()
        else:
            used.add(reason)
    assert used <= set(REJECTION_REASONS), used - set(REJECTION_REASONS)
    assert set(REJECTION_REASONS) <= used, set(REJECTION_REASONS) - used


def test_a_row_that_echoes_a_status_has_an_error_that_carries_one() -> None:
    for kind, answer in ANSWERS.items():
        if answer.echoes:
            bases = [base for base in kind.__mro__ if issubclass(base, DomainError)]
            assert any("self.status = " in inspect.getsource(base) for base in bases), kind


def test_nothing_beside_the_table_builds_an_error_answer_or_counts_a_rejection() -> None:
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        if path == TABLE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            name = ast.unparse(node.func).rsplit(".", 1)[-1]
            assert name not in ("record_rejection", "force_close"), where
            if name in ("json_response", "Response", "StreamResponse"):
                given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "status")]
                for status in given:
                    value = status.value if isinstance(status, ast.Constant) else None
                    assert not (isinstance(value, int) and value >= 400), where
