"""Fixtures of every tier: each test starts without the proxy's settings in its environment;
``http`` (a client session) and ``sim_server`` (start an in-process simulated replica with
given settings: ``async with sim_server(max_loras=2) as (url, app)``).

``PROXY_*`` variables configure the proxy (``proxy.config``: flags, then ``PROXY_*``, then the
file, then the defaults), so a developer's exported ``PROXY_API_KEY`` or ``PROXY_POLICY`` would
change every stack a test builds in process and every proxy, CLI or trainer it starts as a child
(children inherit ``os.environ``). Both fixtures remove them with ``delenv``: a test can still
set its own through ``monkeypatch``, and the developer's values come back when the run ends.

What a proxy keeps per port in the temp directory (its adapter store, its window's state file:
``proxy.adapters.wiring``) is likewise private: each test (and the session, for fixtures of a
wider scope) has a temp directory of its own, so no test restores another's window, and two
suites at once (two worktrees, a helper's run beside CI's) never share ``rollout-proxy-8000-*``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from tests.support.fleet import SimServer, serve_sim_app

PREFIX = "PROXY_"


def _proxy_variables() -> list[str]:
    return [name for name in os.environ if name.startswith(PREFIX)]


@pytest.fixture(autouse=True, scope="session")
def _no_proxy_settings_in_the_session() -> Iterator[None]:
    """Gone before the first fixture of any scope is built (a module's stack, the e2e fleet)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in _proxy_variables():
            patch.delenv(name)
        yield


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """And again before each test: one whose code under test wrote ``os.environ`` directly
    changes no later test."""
    for name in _proxy_variables():
        monkeypatch.delenv(name)


@pytest.fixture(autouse=True, scope="session")
def _private_tempdir_in_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        _use_tempdir(patch, tmp_path_factory)
        yield


@pytest.fixture(autouse=True)
def _private_tempdir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_tempdir(monkeypatch, tmp_path_factory)


def _use_tempdir(patch: pytest.MonkeyPatch, factory: pytest.TempPathFactory) -> None:
    """This process's temp directory and its children's (``TMPDIR``): a fresh one."""
    folder = str(factory.mktemp("tempdir"))
    patch.setattr(tempfile, "tempdir", folder)
    patch.setenv("TMPDIR", folder)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def sim_server() -> SimServer:
    return serve_sim_app
