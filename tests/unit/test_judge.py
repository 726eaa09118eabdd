"""Comparative evidence without the trainer's reference: a replica whose answer for a version
stays where its base model's (or an earlier version's) was, while another replica's moved, is
suspect; the alarm rings at the first suspicion, withholding waits for ``repeat`` of them."""

from __future__ import annotations

from proxy.adapters.attest.judge import Judge

TOL = 1e-3
BASE = (-1.0, -2.0, -3.0)


def moved(n: int) -> tuple[float, ...]:
    return tuple(x - 0.1 * n for x in BASE)


def test_a_replica_answering_its_base_model_is_suspect_and_withheld_at_the_repeat() -> None:
    judge = Judge(repeat=3)
    judge.base("honest", BASE)
    judge.base("faulty", BASE)
    for n in (1, 2, 3):
        name = f"trl-policy-v{n}"
        assert judge.answer("honest", name, moved(n), TOL) == []
        assert judge.answer("faulty", name, BASE, TOL) == ["faulty"]
        assert judge.alarm
        assert judge.withheld("faulty", name) is (n == 3)
    assert all(judge.withheld("faulty", f"trl-policy-v{n}") for n in (1, 2, 3))
    assert not any(judge.withheld("honest", f"trl-policy-v{n}") for n in (1, 2, 3))


def test_the_order_of_the_answers_does_not_matter() -> None:
    judge = Judge(repeat=1)
    judge.base("honest", BASE)
    judge.base("faulty", BASE)
    assert judge.answer("faulty", "trl-policy-v1", BASE, TOL) == []  # nobody moved yet
    assert not judge.alarm
    assert judge.answer("honest", "trl-policy-v1", moved(1), TOL) == ["faulty"]
    assert judge.withheld("faulty", "trl-policy-v1")


def test_a_replica_answering_the_previous_version_is_suspect() -> None:
    judge = Judge(repeat=1)
    for rid in ("honest", "faulty"):
        judge.base(rid, BASE)
        judge.answer(rid, "trl-policy-v1", moved(1), TOL)
    assert not judge.alarm
    judge.answer("honest", "trl-policy-v2", moved(2), TOL)
    assert judge.answer("faulty", "trl-policy-v2", moved(1), TOL) == ["faulty"]


def test_a_version_that_moves_nothing_suspects_nobody() -> None:
    """A step too small to show (both replicas answer as before): no evidence either way."""
    judge = Judge(repeat=1)
    for rid in ("a", "b"):
        judge.base(rid, BASE)
        assert judge.answer(rid, "trl-policy-v1", BASE, TOL) == []
    assert not judge.alarm


def test_a_restarted_replica_is_judged_afresh_but_its_suspicions_stay() -> None:
    judge = Judge(repeat=2)
    judge.base("honest", BASE)
    judge.base("faulty", BASE)
    judge.answer("honest", "trl-policy-v1", moved(1), TOL)
    judge.answer("faulty", "trl-policy-v1", BASE, TOL)
    judge.forget("faulty")
    assert not judge.has_base("faulty")
    assert judge.suspicions("faulty") == 1


def test_what_it_keeps_is_bounded() -> None:
    judge = Judge(repeat=100, keep=4)
    judge.base("honest", BASE)
    judge.base("faulty", BASE)
    for n in range(1, 20):
        judge.answer("honest", f"trl-policy-v{n}", moved(n), TOL)
        judge.answer("faulty", f"trl-policy-v{n}", BASE, TOL)
    assert judge.suspicions("faulty") == 4
