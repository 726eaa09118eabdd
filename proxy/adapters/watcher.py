"""Polling an adapter source and reporting what changed.

``Watcher`` diffs successive answers of a ``sources.Source`` and reports additions (new or
changed files) and removals; it runs in the app's lifecycle with an injected clock and survives
its source's failures (logged once per distinct error, retried at the next interval).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from proxy.adapters.registry import Fingerprint
from proxy.adapters.sources import Found, Source
from proxy.clock import Clock, Failed, run_every

log = logging.getLogger("proxy.watcher")

OnChange = Callable[[dict[str, tuple[str, Fingerprint]], list[str]], Awaitable[None]]


class Watcher:
    """Polls a source; calls ``on_change(added_or_changed, removed)`` after its first scan and
    whenever the answer moves."""

    def __init__(self, source: Source, clock: Clock, on_change: OnChange, failed: Failed) -> None:
        self.source = source
        self._clock = clock
        self._failed = failed
        self._on_change = on_change
        self.known: Found = {}
        self.scans = 0
        self.last_error = ""

    async def run(self) -> None:
        await run_every(
            self._clock,
            lambda: self.source.interval_s,
            self.poll,
            task="watcher",
            failed=self._failed,
        )

    async def poll(self) -> None:
        try:
            found = await self.source.scan()
        except Exception as exc:  # a flaky source must not stop the watcher
            message = f"{type(exc).__name__}: {exc}"
            if message != self.last_error:
                log.warning("adapter source %s failed: %s", self.source.describe(), message)
            self.last_error = message
            return
        self.last_error = ""
        self.scans += 1
        changed = {name: v for name, v in found.items() if self.known.get(name) != v}
        removed = [name for name in self.known if name not in found]
        self.known = found
        if changed or removed or self.scans == 1:  # the first answer is news even if empty
            await self._on_change(changed, removed)
