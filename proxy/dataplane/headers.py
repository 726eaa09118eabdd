"""The headers every answer the proxy forwards carries, besides the replica's own: which replica
gave it (``X-Rollout-Replica``), why it was chosen (``X-Rollout-Route``), for an adapter version
the policy that answered (``X-Rollout-Policy: <version>@<content digest>``, what its agent
checked), and the request's id; of the replica's headers only ``Content-Type`` and
``Content-Encoding`` pass (a body is forwarded as the bytes it came in)."""

from __future__ import annotations

from proxy.fleet.replica import Replica

_PASS_HEADERS = (("Content-Type", "content-type"), ("Content-Encoding", "content-encoding"))
REPLICA_HEADER = "X-Rollout-Replica"
POLICY_HEADER = "X-Rollout-Policy"  # the adapter version that answered, and its content digest
DIGEST_SHOWN = 12  # hex characters of a digest shown (header, status, metrics)
ROUTE_HEADER = "X-Rollout-Route"  # the routing decision's reason
REQUEST_ID_HEADER = "X-Request-ID"


def response_headers(
    upstream: dict[str, str], replica: Replica, reason: str, model: str | None, request_id: str
) -> dict[str, str]:
    """The headers of ``replica``'s answer to a request for ``model`` routed for ``reason``."""
    headers = {REPLICA_HEADER: replica.id, ROUTE_HEADER: reason}
    for name, key in _PASS_HEADERS:
        value = upstream.get(key)
        if value is not None:
            headers[name] = value
    digest = replica.digests.get(model) if model is not None else None
    if digest is not None:  # the policy that answered: version @ its digest
        headers[POLICY_HEADER] = f"{model}@{digest[:DIGEST_SHOWN]}"
    if request_id:
        headers[REQUEST_ID_HEADER] = request_id
    return headers
