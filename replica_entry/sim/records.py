"""What the replica saw, for tests: one record per request and a few counters.

Records live in a bounded deque (oldest dropped first), so a long benchmark cannot grow the
replica without bound. A record is filled in as the request goes: the middleware opens it with
method, path and headers; handlers add model and token counts; the middleware closes it with
the status, or marks it ``cancelled`` when the client left before the answer was complete.
The Authorization header's value is never stored: only whether it matched.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_MAX_RECORDS = 10_000


@dataclass(slots=True)
class RequestRecord:
    seq: int
    method: str
    path: str
    query: str
    authorized: bool | None
    routing_key: str | None
    model: str | None = None
    status: int | None = None
    cancelled: bool = False
    dropped: bool = False
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    top_logprobs: int | None = None  # asked for (the proxy's served-policy probe asks 20)


@dataclass(slots=True)
class RequestLog:
    """The records, oldest first; iterate or index it like a list (``log[-1]`` is the latest)."""

    maxlen: int = DEFAULT_MAX_RECORDS
    records: deque[RequestRecord] = field(init=False)
    total: int = 0
    cancelled: int = 0
    dropped: int = 0

    def __post_init__(self) -> None:
        self.records = deque(maxlen=self.maxlen)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> RequestRecord:
        return self.records[index]

    def open(
        self,
        method: str,
        path: str,
        query: str,
        authorized: bool | None,
        routing_key: str | None,
    ) -> RequestRecord:
        self.total += 1
        record = RequestRecord(self.total, method, path, query, authorized, routing_key)
        self.records.append(record)
        return record

    def mark_cancelled(self, record: RequestRecord) -> None:
        if not record.cancelled:
            record.cancelled = True
            self.cancelled += 1

    def mark_dropped(self, record: RequestRecord) -> None:
        record.dropped = True
        self.dropped += 1

    def clear(self) -> None:
        self.records.clear()
        self.total = self.cancelled = self.dropped = 0

    def as_json(self) -> list[dict[str, Any]]:
        return [asdict(record) for record in self.records]
