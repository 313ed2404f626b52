"""The wrapped handler of each method, kept: for the server interceptors whose wrapping depends
only on the handler they are given (the call counter, the undecodable-request check, the thread
bridge for plain streams), not on the call.

gRPC runs every interceptor for every call, and resolves a method to the same handler object
each time, so such an interceptor would build the same closures on every call (with the chain
run as one interceptor, this saved 35 µs of CPU a sequential send: docs/performance/history.md,
"One sequential send, thread by thread"). `WrapCache` keeps, per method, the last handler
it was given and what it made of it; a different handler (an inner interceptor that wraps per
call, such as the ACL check or a refusal) is wrapped again and replaces the entry. Entries are
only made for methods that resolved to a handler, so there is at most one per served method.

Locking: none. The dict is only read and replaced whole entry by entry (atomic under the GIL);
two calls racing on a new entry both wrap, and either result is right.
"""
from __future__ import annotations

from typing import Any, Callable


class WrapCache:
    """Per method, the last handler seen and its wrapped form (the module docstring). No
    lock: entries are read and replaced whole (atomic under the GIL)."""

    def __init__(self, wrap: Callable[[Any, str], Any]) -> None:
        self._wrap = wrap  # (handler, method) -> the wrapped handler
        self._entries: dict[str, tuple[Any, Any]] = {}

    def get(self, handler: Any, method: str) -> Any:
        entry = self._entries.get(method)
        if entry is not None and entry[0] is handler:
            return entry[1]
        wrapped = self._wrap(handler, method)
        self._entries[method] = (handler, wrapped)
        return wrapped
