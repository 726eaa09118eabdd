"""Polling an adapter source and reporting what changed.

``Watcher`` diffs successive answers of a ``sources.Source`` and reports additions (new or
changed files) and removals; it runs in the app's lifecycle with an injected clock and survives
its source's failures (logged once per distinct error, retried at the next interval).

A source whose place does not exist (``sources.SourceMissing``: ``--adapters-dir`` on a bucket
that mounts late) is said at once in one WARNING line, again every ``MISSING_REMIND_S`` while it
stays missing (one line per five minutes: a late mount is normal, so no flood, and whoever reads
the end of the log still learns why no version loads), and shown by ``warnings()`` in the status
page and the advisor's advice all along. The watch's start is said in one INFO line at its first
answer: at start, or when the missing place appears.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from proxy.adapters.registry import Fingerprint
from proxy.adapters.sources import Found, Source, SourceMissing
from proxy.clock import Clock, TaskFailed, run_every

log = logging.getLogger("proxy.watcher")

MISSING_REMIND_S = 300.0  # a source still missing is said again this often

OnChange = Callable[[dict[str, tuple[str, Fingerprint]], list[str]], Awaitable[None]]


class Watcher:
    """Polls a source; calls ``on_change(added_or_changed, removed)`` after its first scan and
    whenever the answer moves."""

    def __init__(
        self, source: Source, clock: Clock, on_change: OnChange, failed: TaskFailed
    ) -> None:
        self.source = source
        self._clock = clock
        self._failed = failed
        self._on_change = on_change
        self.known: Found = {}
        self.scans = 0
        self.last_error = ""
        self.missing = ""  # why the source's place cannot be read now (it does not exist yet)
        self._missing_since = 0.0
        self._said_at = 0.0

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
        except SourceMissing as exc:
            self._missed(str(exc))
            return
        except Exception as exc:  # a flaky source must not stop the watcher
            message = f"{type(exc).__name__}: {exc}"
            if message != self.last_error:
                log.warning("adapter source %s failed: %s", self.source.describe(), message)
            self.last_error = message
            return
        self.last_error = ""
        if self.missing or not self.scans:
            appeared = ""
            if self.missing:
                waited = self._clock.monotonic() - self._missing_since
                appeared = f" (it appeared after {waited:.0f} s)"
            log.info("watching %s for adapter versions%s", self.source.describe(), appeared)
            self.missing = ""
        self.scans += 1
        changed = {name: v for name, v in found.items() if self.known.get(name) != v}
        removed = [name for name in self.known if name not in found]
        self.known = found
        if changed or removed or self.scans == 1:  # the first answer is news even if empty
            await self._on_change(changed, removed)

    def _missed(self, message: str) -> None:
        now = self._clock.monotonic()
        if not self.missing:
            self._missing_since = self._said_at = now
            log.warning(
                "%s: no adapter version is found until it does; looking every %g s (a bucket "
                "may mount late)", message, self.source.interval_s,
            )  # fmt: skip
        elif now - self._said_at >= MISSING_REMIND_S:
            self._said_at = now
            log.warning("%s, %.0f s after the first look", message, now - self._missing_since)
        self.missing = message

    def warnings(self) -> list[str]:
        """What the status page and the advisor say while the source is missing."""
        if not self.missing:
            return []
        return [f"{self.missing}: no adapter version is found until it does"]
