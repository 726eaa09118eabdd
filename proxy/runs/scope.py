"""A request's scope: the bare path (the default scope) or one run under ``/runs/<run>/``.

The edge resolves it once per request (``proxy.http.edge``); the handlers, one set for
both, ask it how a name and a path look on the replicas and back, whether the run's pause gate
lets a new request through, and what share of ``max_loras`` the run holds. The bare path's
scope changes nothing: names and paths are the replicas' own. Pure apart from the pause gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.runs.names import scoped, unscope_text, unscoped
from proxy.runs.table import Run, RunPaused

PREFIX = "/runs/{run}"


@dataclass(frozen=True, slots=True)
class Scope:
    run: Run | None = None

    @property
    def name(self) -> str | None:
        """The run's name; None on the bare path (whose slots are a class of their own)."""
        return self.run.name if self.run is not None else None

    def replica_name(self, name: str) -> str:
        return scoped(self.run.name, name) if self.run is not None else name

    def own_name(self, name: str) -> str | None:
        """This scope's name for a replica-side ``name`` (None: another run's)."""
        return unscoped(self.run.name, name) if self.run is not None else name

    def target(self, path_qs: str) -> str:
        """The path and query the replicas get: the request's, without ``/runs/<run>``."""
        return path_qs if self.run is None else path_qs.removeprefix(f"/runs/{self.run.name}")

    def answer(self, body: bytes) -> bytes:
        """An answer's bytes with the run's own names (an echoed error, a load's answer)."""
        return body if self.run is None else unscope_text(body, self.run.name)

    async def admitted(self, timeout_s: float) -> None:
        """Until the run's pause gate is open; ``RunPaused`` after ``timeout_s``."""
        if self.run is not None and not await self.run.admitted(timeout_s):
            raise RunPaused(self.run.name, timeout_s)


BARE = Scope()
