"""A shared fleet's admin key, derived from the user's HF token rather than stored anywhere.

``deploy fleet up`` gives the fleet's proxy job the key (``PROXY_ADMIN_KEY``); each later
``deploy up --fleet`` by the same user derives the same key and gives it to its trainer
(``FLEET_ADMIN_KEY``), which declares its run with it (``trainer_entry.fleet_run``). HMAC-SHA256
keyed with the token over the fleet's name: the key reveals nothing of the token, differs per
fleet, and needs no secret store; a user whose token changed since the fleet started joins with
the old one or starts the fleet again.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def fleet_key(hf_token: str, fleet: str) -> str:
    """The admin key of fleet ``fleet`` for the holder of ``hf_token`` (URL-safe text)."""
    message = f"rollout-proxy fleet {fleet}".encode()
    digest = hmac.new(hf_token.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
