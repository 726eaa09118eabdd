"""The pure health transition function."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.config import HealthSettings
from proxy.fleet.health import ProbeState, Transition, next_state
from proxy.fleet.replica import Health

SETTINGS = HealthSettings(eject_after=3, readmit_after=2)


def run(start: Health, probes: list[bool]) -> list[Transition]:
    state = ProbeState(start, 0, 0)
    out = []
    for ok in probes:
        state, transition = next_state(state, ok, SETTINGS)
        if transition is Transition.ADMIT:
            state = ProbeState(Health.HEALTHY, state.ok_streak, state.fail_streak)
        out.append(transition)
    return out


def test_pending_is_admitted_on_first_success() -> None:
    assert run(Health.PENDING, [False, True]) == [Transition.NONE, Transition.ADMIT]


def test_eject_after_three_consecutive_failures_only() -> None:
    assert run(Health.HEALTHY, [False, False, True, False, False]) == [Transition.NONE] * 5
    assert run(Health.HEALTHY, [False, False, False])[-1] is Transition.EJECT


def test_readmit_after_two_consecutive_successes() -> None:
    assert run(Health.EJECTED, [True, False, True, True]) == [
        Transition.NONE,
        Transition.NONE,
        Transition.NONE,
        Transition.ADMIT,
    ]


@given(st.lists(st.booleans(), max_size=40))
def test_transitions_alternate_and_need_streaks(probes: list[bool]) -> None:
    transitions = [t for t in run(Health.EJECTED, probes) if t is not Transition.NONE]
    # Admissions and ejections alternate, starting with an admission from EJECTED.
    for i, transition in enumerate(transitions):
        assert transition is (Transition.ADMIT if i % 2 == 0 else Transition.EJECT)
