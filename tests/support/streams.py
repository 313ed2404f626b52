"""The request side of a streaming gRPC call that a test feeds as it goes."""
from __future__ import annotations

import queue
from typing import Any, Iterator


class Outbox:
    """Requests for a streaming call: pass the Outbox as the call's request iterator, put()
    requests from any thread; close() ends the request stream."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()

    def put(self, request: Any) -> None:
        self._queue.put(request)

    def close(self) -> None:
        self._queue.put(None)

    def __iter__(self) -> Iterator[Any]:
        while True:
            request = self._queue.get()
            if request is None:
                return
            yield request
