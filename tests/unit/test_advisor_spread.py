"""The advisor sees how the window's requests spread over the routable replicas: 40 of 41 on one
replica is never ``balanced``. It is ``concentrated`` when that is expected (routed by prefix
key: the requests shared a prefix; or one request at a time: the first idle replica wins each
tie), with why, and ``imbalanced`` otherwise, with what to check."""

from __future__ import annotations

from proxy.insight.advisor import MIN_REQUESTS, RunSample, Sample, advise, advise_run

RIDS = ("h1:8000", "h2:8000", "h3:8000")


def window(
    per_second: dict[str, float],
    *,
    reason: str = "affinity",
    inflight: int = 1,
    steady: int = 0,
    late: str | None = None,
) -> list[Sample]:
    """Ten samples a second apart: each replica answering ``per_second[rid]`` requests a second,
    every decision for ``reason``; in flight ``inflight`` in one sample of two (no plateau), or
    ``steady`` in every sample; ``late`` routable in the last three samples only."""
    samples = []
    for t in range(10):
        routable = [r for r in RIDS if r != late or t >= 7]
        total = sum(per_second.values()) * t
        samples.append(
            Sample(
                at=float(t),
                inflight=steady or (inflight if t % 2 else 0),
                queued=0,
                replica_inflight=dict.fromkeys(routable, 0),
                replica_requests={r: per_second.get(r, 0.0) * t for r in routable},
                decisions={reason: total},
                requests=total,
                runs={"a": RunSample(0, 0, 0.0)},
            )
        )
    return samples


def test_one_prompts_requests_on_one_replica_are_concentrated_and_why() -> None:
    """The issue's case: 40 of 41 requests on one replica, routed by prefix affinity."""
    samples = window({"h1:8000": 40 / 9, "h2:8000": 1 / 9})
    advice = advise(samples)
    assert advice.verdict == "concentrated"
    assert advice.action.startswith(
        "h1:8000 took 40 of the window's 41 requests (98%; 3 replicas routable): expected, as "
        "prefix affinity keeps requests that share a prompt prefix"
    )
    assert advice.figures["requests_busiest_share"] == 40 / 41
    assert advice.figures["keyed_share"] == 1.0


def test_one_request_at_a_time_without_a_key_is_concentrated_and_harmless() -> None:
    advice = advise(window({"h1:8000": 5.0}, reason="no_key"))
    assert advice.verdict == "concentrated"
    assert "one request at a time" in advice.action


def test_unkeyed_requests_piling_on_one_replica_are_imbalanced() -> None:
    """Requests overlap (up to 3 in flight), are not routed by key, and still one replica takes
    most: something keeps the others from taking them."""
    advice = advise(window({"h1:8000": 8.0, "h2:8000": 1.0}, reason="no_key", inflight=3))
    assert advice.verdict == "imbalanced"
    assert advice.action.startswith("h1:8000 took 72 of the window's 81 requests (89%")
    assert "check that every replica serves the models asked for" in advice.action


def test_requests_spread_over_the_replicas_are_balanced() -> None:
    assert advise(window(dict.fromkeys(RIDS, 3.0))).verdict == "balanced"
    # Too few requests to judge their spread.
    few = MIN_REQUESTS / 9 - 0.5
    assert advise(window({"h1:8000": few})).verdict == "balanced"


def test_a_replica_that_joined_late_is_judged_from_when_it_joined() -> None:
    """h3 is routable in the last three samples: the spread is read over those (20 requests
    each), not over the whole window, where h3 would look idle beside the others' 90."""
    samples = window(dict.fromkeys(RIDS, 10.0), late="h3:8000")
    advice = advise(samples)
    assert advice.verdict == "balanced"
    assert advice.figures["requests_busiest_share"] == 1 / 3


def test_a_runs_verdict_does_not_judge_the_fleets_spread() -> None:
    samples = window({"h1:8000": 5.0}, steady=0)
    assert advise(samples).verdict == "concentrated"
    assert advise_run(samples, "a").verdict == "idle"
