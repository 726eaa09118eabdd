"""The memory budget for request bodies held by the proxy (read, queued or being forwarded).

Every body is reserved before it is read (its Content-Length, or the body limit when it is
chunked) and released when its request ends, so bodies in flight and in the wait queue never
hold more than ``limit`` bytes together. A request that does not fit is refused at once (503,
``Retry-After``) instead of waiting: the budget protects the proxy, it is not a queue.
"""

from __future__ import annotations


class BodyBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def reserve(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        self.held -= size
