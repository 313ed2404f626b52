"""gRPC calls by method and status code: an asyncio server interceptor, outermost, so it sees
every handler in its final form (plain functions run in the pool, coroutines, async generators
for streams) and wraps each in the same form. The code is the context's when the handler
returns or aborts (OK when none was set), UNKNOWN for an exception that escaped.

Locking: `_lock` guards `counts` (handlers finish on the loop and on pool threads)."""
from __future__ import annotations

import inspect
import threading
from typing import Any, Callable

import grpc
import grpc.aio

from cluster.serving.handler_cache import WrapCache


class _Recording:
    """The handler's context, noting the code it aborts with or sets (the asyncio server's
    context does not report the code a plain handler aborted with)."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self.recorded: Any = None

    def abort(self, code, details="", trailing_metadata=()):
        self.recorded = code
        return self._context.abort(code, details, trailing_metadata)

    def set_code(self, code) -> None:
        self.recorded = code
        self._context.set_code(code)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _code_of(context: _Recording, failed: bool) -> str:
    code = context.recorded
    if code is None:
        try:
            code = context.code()
        except Exception:  # noqa: BLE001 - a context without code(): judge by the outcome
            code = None
    if code is None:
        return "UNKNOWN" if failed else "OK"
    if isinstance(code, grpc.StatusCode):
        return code.name
    return _BY_NUMBER.get(code, str(code))  # the aio context answers the number


_BY_NUMBER = {c.value[0]: c.name for c in grpc.StatusCode}


class CallCounter(grpc.aio.ServerInterceptor):
    """Counts the server's finished calls by (method, status code) (the module docstring):
    owns `counts` and the cache of wrapped handlers. `_lock` guards `counts`, since handlers
    finish on the event loop and on pool threads; `snapshot` copies it under the lock."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._wrapped = WrapCache(self._wrap_handler)

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.counts)

    def _count(self, method: str, context: _Recording, failed: bool) -> None:
        key = (method, _code_of(context, failed))
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self._wrapped.get(handler, handler_call_details.method)

    def _wrap_handler(self, handler, method: str):
        for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            behavior = getattr(handler, kind)
            if behavior is not None:
                return handler._replace(**{kind: self._wrap(behavior, method)})
        return handler

    def _wrap(self, behavior: Callable, method: str) -> Callable:
        count = self._count
        if inspect.isasyncgenfunction(behavior):
            async def agen(request, context):
                failed, context = True, _Recording(context)
                try:
                    async for item in behavior(request, context):
                        yield item
                    failed = False
                finally:
                    count(method, context, failed)
            return agen
        if inspect.iscoroutinefunction(behavior):
            async def coro(request, context):
                failed, context = True, _Recording(context)
                try:
                    result = await behavior(request, context)
                    failed = False
                    return result
                finally:
                    count(method, context, failed)
            return coro
        if inspect.isgeneratorfunction(behavior):
            def gen(request, context):
                failed, context = True, _Recording(context)
                try:
                    yield from behavior(request, context)
                    failed = False
                finally:
                    count(method, context, failed)
            return gen

        def plain(request, context):
            failed, context = True, _Recording(context)
            try:
                result = behavior(request, context)
                failed = False
                return result
            finally:
                count(method, context, failed)
        return plain
