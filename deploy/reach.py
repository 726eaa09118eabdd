"""Whether the Hub answers at all, asked once before a command's first Hub call.

huggingface_hub retries a call that gets no answer (``http_backoff``: 5 retries, 1+2+4+8+8 s, so
an offline ``deploy status`` took 23 s), and the command's error then suggested the token's
permissions. ``reachable`` asks the endpoint once per attempt of ``REACH`` (any answer, even an
error status, proves the network): a name that does not resolve or a refused connection is told
in well under a second, a silent network within ``attempts x timeout_s + pauses`` (about 9 s),
as one line that says it is the network (``network_error``, also what the commands print for a
call that loses the network later).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from deploy.errors import DeployError
from deploy.jobs import NETWORK_ERRORS


@dataclass(frozen=True, slots=True)
class Reach:
    """How hard to try before the network is called down."""

    attempts: int = 2
    timeout_s: float = 4.0
    pause_s: float = 0.5


REACH = Reach()


def network_error(endpoint: str, exc: BaseException) -> DeployError:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return DeployError(
        f"cannot reach the Hub at {endpoint} ({reason}): the network, not your token: check this "
        "machine's connection, a proxy (HTTPS_PROXY) or --hub-endpoint"
    )


def reachable(
    endpoint: str | None, reach: Reach = REACH, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Return once ``endpoint`` (default: huggingface_hub's) answers; ``DeployError`` with the
    network line when no attempt got an answer."""
    from huggingface_hub import constants, get_session
    from huggingface_hub.errors import OfflineModeIsEnabled

    url = endpoint or constants.ENDPOINT
    failure: BaseException | None = None
    for attempt in range(reach.attempts):
        if attempt:
            sleep(reach.pause_s)
        try:
            get_session().head(url, timeout=reach.timeout_s)
            return
        except OfflineModeIsEnabled:
            raise DeployError(
                "HF_HUB_OFFLINE is set, and every deploy command but `up --dry-run` talks to the "
                "Hub: unset it"
            ) from None
        except NETWORK_ERRORS as exc:
            failure = exc
    assert failure is not None
    raise network_error(url, failure)
