"""A window of samples of the run, taken in the background, and the advice it gives.

``read()`` (composed by the app from the limiter, the pool, the fleet and the metrics) returns a
``Sample``; the sampler calls it every ``window_s / SAMPLES`` seconds and keeps the samples of
the last ``window_s`` seconds (at most ``SAMPLES + 1``). ``advice()`` is the advisor's verdict on
that window, computed when asked (the status page, the metrics scrape).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from proxy.clock import Clock, TaskFailed, run_every
from proxy.insight.advisor import Advice, Sample, advise, advise_run

SAMPLES = 60


class Sampler:
    def __init__(
        self, clock: Clock, read: Callable[[], Sample], window_s: float, failed: TaskFailed
    ) -> None:
        self._clock = clock
        self._read = read
        self.window_s = window_s
        self._failed = failed
        self._samples: deque[Sample] = deque(maxlen=SAMPLES + 1)

    async def run(self) -> None:
        await run_every(
            self._clock,
            lambda: self.window_s / SAMPLES,
            self.sample,
            task="advisor",
            failed=self._failed,
        )

    async def sample(self) -> None:
        self._samples.append(self._read())

    def advice(self) -> Advice:
        return advise(list(self._samples))

    def run_advice(self) -> dict[str, Advice]:
        """Each run's own verdict (several runs on one fleet), for the runs declared now."""
        window = list(self._samples)
        names = window[-1].runs if window else {}
        return {name: advise_run(window, name) for name in names}
