"""A request's run: the default run (the bare path, ``DEFAULT``) or one declared under
``/runs/<run>/`` (``table.DeclaredRun``). Every request has one, resolved once at the edge, and
one set of handlers serves both: what differs is a method of the run, never a branch at the use.

What a run decides:
- names and paths: how a model or adapter name looks on the replicas and back
  (``replica_name``, ``own_name``, ``answer``), and the path the replicas get (``target``): a
  declared run's are namespaced (``names``), the default run's are the replicas' own;
- admission: the pause gate a new generation request waits at (``admission``: None when open,
  so an open gate costs no await; the default run's is always open);
- shares: of each replica's ``max_loras``, of the wait queue and of the slots (``weight``,
  ``share``), and whether a load past its share is refused (``over_share``: a declared run's is;
  the default run's window trims its oldest version instead, ``adapters.registry``);
- TRL's pause and resume (``control``): the default run's fan out to the fleet (or are answered
  by the proxy), a declared run's close and open its own gate; both act through the ``Control``
  the edge passes in, so this package imports nothing of the data plane;
- what TRL reads of its server: ``server_info`` (a declared run's share of ``max_loras``) and
  ``models`` (a declared run's adapters under its own names).

The default run is stateless and stays out of the runs table, its shares and the admin listing.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

PREFIX = "/runs/{run}"  # a declared run's routes


class Control(Protocol[R_co]):
    """What a run's pause and resume act through (the HTTP edge's): the fleet's fan-out (or the
    proxy's own answer to TRL's pause), and an answer the run makes itself."""

    async def fan_out(self, path: str, query: str) -> R_co: ...

    def answer(self, payload: dict[str, Any]) -> R_co: ...


class Run(abc.ABC):
    """See the module docstring. ``name``: the run's ("" for the default run), the ``run`` label
    of its figures; ``weight``: its share of the fleet against the other runs'."""

    name: str
    weight: float

    @abc.abstractmethod
    def replica_name(self, name: str) -> str:
        """The name the replicas hold for this run's ``name``."""

    @abc.abstractmethod
    def own_name(self, name: str) -> str | None:
        """This run's name for a replica-side ``name`` (None: another run's)."""

    @abc.abstractmethod
    def target(self, path_qs: str) -> str:
        """The path and query the replicas get for this run's request to ``path_qs``."""

    @abc.abstractmethod
    def answer(self, body: bytes) -> bytes:
        """An answer's bytes with this run's own names (an echoed error, a load's answer)."""

    @abc.abstractmethod
    def admission(self, timeout_s: float) -> Awaitable[None] | None:
        """None when a new generation request may go at once; else what it awaits (raising
        ``RunPaused`` after ``timeout_s``)."""

    @abc.abstractmethod
    def share(self, amount: int) -> int:
        """This run's share of ``amount`` (a replica's ``max_loras``, the queue's size)."""

    @abc.abstractmethod
    def over_share(self, held: int, max_loras: int) -> str | None:
        """Why a load that would make this run hold ``held`` + 1 adapters is refused, or None."""

    @abc.abstractmethod
    def server_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """The fleet's ``/server_info`` as this run's TRL is to read it."""

    @abc.abstractmethod
    def models(self, listing: dict[str, Any]) -> dict[str, Any]:
        """The fleet's ``/v1/models`` (the base model first) as this run's TRL is to read it."""

    @abc.abstractmethod
    async def control(self, path: str, query: str, fleet: Control[R]) -> R:
        """TRL's ``/pause`` or ``/resume`` for this run."""

    @abc.abstractmethod
    def answered(self) -> None:
        """A request of this run was answered (counted by a declared run)."""


class DefaultRun(Run):
    """The bare path: the replicas' own names and paths, no gate, the whole of every share;
    its pause and resume are the fleet's. Stateless."""

    name = ""
    weight = 1.0

    def replica_name(self, name: str) -> str:
        return name

    def own_name(self, name: str) -> str | None:
        return name

    def target(self, path_qs: str) -> str:
        return path_qs

    def answer(self, body: bytes) -> bytes:
        return body

    def admission(self, timeout_s: float) -> Awaitable[None] | None:
        return None

    def share(self, amount: int) -> int:
        return amount

    def over_share(self, held: int, max_loras: int) -> str | None:
        return None  # its window trims its oldest version (``adapters.registry``)

    def server_info(self, info: dict[str, Any]) -> dict[str, Any]:
        return info

    def models(self, listing: dict[str, Any]) -> dict[str, Any]:
        return listing

    async def control(self, path: str, query: str, fleet: Control[R]) -> R:
        return await fleet.fan_out(path, query)

    def answered(self) -> None:
        pass  # stateless: the bare path's requests are counted by route

    def __repr__(self) -> str:
        return "DefaultRun()"


DEFAULT = DefaultRun()  # the one default run: stateless, so one value serves every app
