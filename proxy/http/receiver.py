"""The proxy's own adapter receiver: the routes a replica's receiver answers (``proxy.adapters.
wire``), so that a relay in front of this proxy pushes adapters here as it would to a replica.

Authenticated like every other route (``--api-key``, by the route guard); the upload streams
into the proxy's store through the same core as a replica's (``adapter_receiver.receive``: bounded
memory, sizes and sha256 checked, atomic publish, per-adapter and store caps). A stored version
is what a later load naming its path pushes on to the replicas (``AdapterService``). A refused
upload is ``UploadRefused`` (the store's status and words; the connection closes, as the body
may be unread), answered by the edge's error table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import ClientPayloadError, web

from adapter_receiver.receive import Answer, ClientGone, Receiver
from proxy.http.edge import RUN
from proxy.http.refusals import UploadRefused
from proxy.http.responses import json_response


class ReceiverRoutes:
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    async def listing(self, request: web.Request) -> web.StreamResponse:
        return _answer(await self.receiver.listing())

    async def upload(self, request: web.Request) -> web.Response:
        """The entry is named as the replicas name the adapter (a run's upload is scoped; the
        answer names the entry's path, which the relay's load then sends as it is)."""
        name = request[RUN].replica_name(request.match_info["name"])
        chunks = _chunks(request)
        answer = await self.receiver.upload(name, request.content_length, chunks)
        if answer.status >= 400:
            raise UploadRefused(answer.status, str(answer.body["error"]["message"]))
        return _answer(answer)


async def _chunks(request: web.Request) -> AsyncIterator[bytes]:
    try:
        async for chunk in request.content.iter_any():
            yield chunk
    except (ClientPayloadError, ConnectionError) as exc:  # in the receiver core's words
        raise ClientGone from exc


def _answer(answer: Answer) -> web.Response:
    return json_response(answer.status, answer.body)
