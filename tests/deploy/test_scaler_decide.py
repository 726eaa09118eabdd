"""The scaler's pure decider (``deploy.scaler.decide``): what it adds, retires and holds, and
why, on hand-made windows of a run. No clock, no I/O: a window is its own time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deploy.scaler.decide import Bounds, Decision, History, Policy, Window, decide

POLICY = Policy(sustain_s=120.0, cooldown_s=300.0, startup_s=240.0)
BOUNDS = Bounds(min_replicas=1, max_replicas=4, replica_per_h=5.0, fixed_per_h=10.0)


def run(
    windows: list[Window], bounds: Bounds = BOUNDS, history: History | None = None
) -> list[Decision]:
    history = history or History()
    decisions = []
    for window in windows:
        decision = decide(window, history, bounds, POLICY)
        decisions.append(decision)
        history = decision.history
    return decisions


def every(seconds: float, until: float, **figures: object) -> list[Window]:
    """A window each ``seconds`` up to ``until``, with the same figures."""
    return [Window(at=float(t), **figures) for t in range(0, int(until) + 1, int(seconds))]  # type: ignore[arg-type]


def added(after: float, until: float = 600.0) -> list[Window]:
    """Pressure on 2 replicas (the trainer waits 40 %), an add at 120 s whose replica starts
    until 360 s; from 360 s on, 3 are ready and the trainer waits ``after``."""
    before = [Window(at=float(t), waited=0.4, ready=2, starting=1 if t > 120 else 0,
                     verdict="generation-bound") for t in range(0, 360, 60)]  # fmt: skip
    return before + every(60, until, waited=after, ready=3)[6:]


def test_pressure_held_for_the_sustain_time_adds_one_replica_then_cools_down() -> None:
    decisions = run(added(after=0.25))  # it paid: the step fell 20 % of the 33 % promised
    actions = [d.action for d in decisions]
    assert actions[:2] == ["hold", "hold"]  # 0 s and 60 s: building
    assert actions[2] == "add" and decisions[2].count == 1  # held 120 s
    assert "waited 40%" in decisions[2].reason
    assert "cooling down" in decisions[3].reason  # the next 300 s (the start-up is 240 s)
    assert actions.count("add") == 2  # 120 s and, after the cooldown and a new sustain, 540 s


def test_an_add_that_did_not_pay_holds_the_next_for_the_back_off() -> None:
    """The trainer waits as much on 3 replicas as on 2: the fleet is not what limits the run
    (TRL's in-flight count is); the replica stays, and no add follows for an hour."""
    decisions = run(added(after=0.4, until=4200.0))
    actions = [d.action for d in decisions]
    assert actions.count("add") == 2  # 120 s, then only once the back-off is over
    assert "did not pay" in decisions[10].reason  # 600 s: the pressure held, no add
    assert all(d.action == "hold" for d in decisions[3:67])
    assert decisions[67].action == "add"  # 4020 s: an hour after the judgment at 420 s
    assert decisions[-1].history.unpaid_at == 420.0  # judged on the first settled window
    assert "retire" not in actions


def test_an_add_is_judged_once_nothing_is_starting() -> None:
    still = [replace(w, starting=1, ready=2) if 120 < w.at <= 480 else w for w in added(after=0.4)]
    decisions = run(still)
    assert decisions[8].history.added == (0.4, 2) and decisions[8].history.unpaid_at is None
    assert decisions[9].history.added is None and decisions[9].history.unpaid_at == 540.0


def test_a_replica_still_starting_holds_the_next_add() -> None:
    decisions = run(every(60, 300, waited=0.5, ready=1, starting=1))
    assert {d.action for d in decisions} == {"hold"}
    assert "still starting" in decisions[-1].reason


def test_slack_held_retires_one_but_never_below_the_minimum() -> None:
    decisions = run(every(60, 240, waited=0.0, ready=3))
    assert [d.action for d in decisions] == ["hold", "hold", "retire", "hold", "hold"]
    at_min = run(every(60, 600, waited=0.0, ready=1))
    assert {d.action for d in at_min} == {"hold"}
    assert "at its minimum" in at_min[-1].reason


def test_between_the_thresholds_nothing_builds() -> None:
    decisions = run(every(60, 900, waited=0.05, ready=2))
    assert {d.action for d in decisions} == {"hold"}
    assert "between the thresholds" in decisions[-1].reason


def test_a_replica_that_would_not_pay_before_the_run_ends_is_not_added() -> None:
    """A replica that takes 4 minutes to start is not added for the last 2 minutes of a run."""
    late = run(every(60, 180, waited=0.5, ready=2, remaining_s=120.0))
    assert {d.action for d in late} == {"hold"}
    assert "would not pay" in late[-1].reason
    early = run(every(60, 180, waited=0.5, ready=2, remaining_s=3600.0))
    assert "add" in [d.action for d in early]


def test_the_measured_start_up_replaces_the_assumed_one() -> None:
    history = History().started(600.0).started(200.0)
    assert history.startup_s == 400.0
    decisions = run(every(60, 180, waited=0.5, ready=2, remaining_s=700.0), history=history)
    assert "would not pay" in decisions[-1].reason  # 400 s > 0.5 x 700 s


def test_the_bounds_are_restored_first_and_never_crossed() -> None:
    below = decide(Window(at=0.0, waited=0.0, ready=0), History(), BOUNDS, POLICY)
    assert (below.action, below.count) == ("add", 1) and "below the minimum" in below.reason
    above = decide(Window(at=0.0, waited=1.0, ready=6), History(), BOUNDS, POLICY)
    assert (above.action, above.count) == ("retire", 2)
    budget = replace(BOUNDS, budget_per_h=22.0)  # 10 fixed + 2 x 5: two replicas at most
    assert budget.ceiling() == 2
    over = decide(Window(at=0.0, waited=0.0, ready=3), History(), budget, POLICY)
    assert (over.action, over.count) == ("retire", 1) and "$22.00/h" in over.reason
    at_ceiling = run(every(60, 600, waited=0.9, ready=2), bounds=budget)
    assert {d.action for d in at_ceiling} == {"hold"}
    assert "at the bound of 2" in at_ceiling[-1].reason


def test_launches_per_hour_are_bounded_and_a_failed_launch_backs_off() -> None:
    bounds = replace(BOUNDS, max_replicas=20, max_launches_per_h=2)
    history = History(launches=(0.0, 10.0))
    held = decide(Window(at=130.0, waited=0.9, ready=2), replace(history, pressure_since=0.0),
                  bounds, POLICY)  # fmt: skip
    assert held.action == "hold" and "2 launches in the last hour" in held.reason
    later = decide(Window(at=3700.0, waited=0.9, ready=2), replace(history, pressure_since=0.0),
                   bounds, POLICY)  # fmt: skip
    assert later.action == "add"  # an hour on: the old launches no longer count
    failed = History(failed_at=0.0, pressure_since=0.0)
    backing = decide(Window(at=300.0, waited=0.9, ready=2), failed, bounds, POLICY)
    assert backing.action == "hold" and "never became ready" in backing.reason


def test_the_range_must_make_sense() -> None:
    with pytest.raises(ValueError, match="1 <= MIN <= MAX"):
        Bounds(min_replicas=3, max_replicas=2, replica_per_h=1.0)
