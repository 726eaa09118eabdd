"""The engine's pause state, as vLLM's ``/pause`` and ``/resume`` drive it.

Modes (vLLM's ``PauseMode``):
- ``keep``: new requests queue; running requests freeze where they are and continue on resume.
- ``wait``: new requests queue; running requests finish; ``/pause`` returns once none run.
- ``abort``: new requests queue; running requests end now with ``finish_reason: "abort"``.

State changes are broadcast by *pulsing*: every waiter holds the event current when it started
waiting; a change sets that event and installs a fresh one, so each waiter wakes exactly once
per change and re-reads the state. An abort bumps ``epoch``; a request admitted under an older
epoch is aborted. Invariant: ``frozen`` implies ``paused``.
"""

from __future__ import annotations

import asyncio
from typing import Literal

PauseMode = Literal["keep", "wait", "abort"]
PAUSE_MODES: tuple[PauseMode, ...] = ("keep", "wait", "abort")


class PauseGate:
    def __init__(self) -> None:
        self.paused = False
        self.frozen = False
        self.epoch = 0
        self._changed = asyncio.Event()

    def next_change(self) -> asyncio.Event:
        """An event that is set at the next state change."""
        return self._changed

    def pause(self, mode: PauseMode) -> None:
        self.paused = True
        self.frozen = mode == "keep"
        if mode == "abort":
            self.epoch += 1
        self._pulse()

    def resume(self) -> None:
        self.paused = False
        self.frozen = False
        self._pulse()

    def _pulse(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
