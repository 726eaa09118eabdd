"""The table of metric families, and the recorder built from it."""

from __future__ import annotations

import typing

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from proxy.fleet.pool import ReplicaPool
from proxy.metrics.families import FAMILIES, Children, Family
from proxy.metrics.recorder import Metrics
from proxy.metrics.tally import Spread, Tally
from tests.support.clock import FakeClock

MADE = {"tally": Tally, "spread": Spread, "counter": Counter, "histogram": Histogram}


def test_each_row_is_made_once_at_its_declared_attribute() -> None:
    metrics = Metrics(ReplicaPool(["http://a:1"], clock=FakeClock()))
    hints = {k: v for k, v in typing.get_type_hints(Metrics).items() if k.startswith("_")}
    assert sorted(hints) == sorted("_" + family.name for family in FAMILIES)
    for family in FAMILIES:
        made, hint = getattr(metrics, "_" + family.name), hints["_" + family.name]
        if family.labels and family.kind in ("counter", "histogram"):
            assert isinstance(made, Children), family.name
            assert typing.get_origin(hint) is Children, family.name
            assert typing.get_args(hint) == (MADE[family.kind],), family.name
            made = made.metric
        else:
            assert hint is MADE[family.kind], family.name
        assert isinstance(made, MADE[family.kind]), family.name


def test_names_are_unique() -> None:
    names = [family.name for family in FAMILIES]
    assert len(names) == len(set(names))


def test_children_bind_each_label_set_once() -> None:
    registry = CollectorRegistry()
    children: Children[Counter] = Children(Counter("c", "c", ["reason"], registry=registry))
    children["a",].inc()
    children["a",].inc(2)
    assert children["a",] is children.metric.labels("a")
    assert registry.get_sample_value("c_total", {"reason": "a"}) == 3
    assert list(children) == [("a",)]


def test_a_row_that_cannot_keep_its_zeros_is_refused() -> None:
    with pytest.raises(ValueError, match="zeros"):
        Family("x", "spread", "x", ("route",), (1.0,), (("a",),))
    with pytest.raises(ValueError, match="zeros"):
        Family("x", "counter", "x", zeros=(("a",),))
