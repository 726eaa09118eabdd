"""The one error the deploy commands raise on purpose: a message that says what to do next."""

from __future__ import annotations


class DeployError(Exception):
    """A failure the user can act on; ``str(error)`` is printed as is and the command exits 1."""
