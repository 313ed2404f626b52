"""The node's one gRPC server: `grpc.aio` on an event loop of its own thread, with a thread pool
for the handlers that block.

Why asyncio: a long poll held by a thread costs a thread (stack, GIL hand-offs) for as long as
it waits, so a threaded server caps the consumers that may wait at once (it used to be 40 of 96
workers). On the loop a waiting ReceiveMessage is a coroutine (a few KiB), and a call runs on
the loop thread itself, without a hand-off between gRPC's poller and a worker thread per call.

Which handler runs where is decided per method by gRPC itself, from what the servicer defines:
`async def` methods run on the loop, plain ones in the pool. For the client API the table of
cluster/serving/execution.py says which each must be (a test holds the servicers to it):
- coroutines on the loop await what they wait for (the flush and replication policy of a
  write, a long poll, a forward's answer), and hand what must block a thread to the pool in
  one way only (`execution.in_pool`, which keeps the call's context variables: the caller's
  signature);
- plain methods (Admin, Membership, Health, Telemetry) run in the pool, as they did on the
  threaded server; streaming ones through thread_bridge.py, which gives them the threaded
  server's context (is_active, cancel).

Server interceptors must be `grpc.aio.ServerInterceptor`s: `AioInterceptors` adapts the node's
synchronous ones (they only inspect metadata and wrap handlers; a wrapper of a coroutine handler
must itself be one, see request_decoding.py and cluster/messaging/v2_access.py).

`AioGrpcServer` owns the loop thread, the pool and the server. Its methods are called from any
thread (the node's); they run what touches the server on the loop and wait for it.

The loop is uvloop's (libuv, in Cython) unless the node sets serverEventLoop=asyncio: gRPC's
completions, the calls' futures and every callback go through the loop, and uvloop's costs
the server 9-25% less CPU per call than asyncio's own (docs/performance/history.md, "The event
loop"). `new_event_loop` falls back to asyncio's where uvloop is not installed.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from concurrent import futures
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import grpc
import grpc.aio

from cluster.config.node_config import EVENT_LOOPS
from .handler_cache import WrapCache
from .thread_bridge import threaded_stream
from cluster.security.tls import TlsSettings, add_port

T = TypeVar("T")
log = logging.getLogger(__name__)

POOL_WORKERS = 96  # blocking handlers: admin calls, replication streams, forwards, sync waits


class _PlainStreamsOnThreads(grpc.aio.ServerInterceptor):
    """Runs every plain (not async) streaming handler through thread_bridge.threaded_stream.
    First in the chain, so it sees the handler as the other interceptors wrapped it."""

    def __init__(self) -> None:
        self._wrapped = WrapCache(lambda handler, _method: _on_threads(handler))

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self._wrapped.get(handler, handler_call_details.method)


def _on_threads(handler):
    if handler.unary_stream and _plain(handler.unary_stream):
        return handler._replace(unary_stream=threaded_stream(handler.unary_stream, False))
    if handler.stream_stream and _plain(handler.stream_stream):
        return handler._replace(stream_stream=threaded_stream(handler.stream_stream, True))
    return handler


def _plain(behavior) -> bool:
    return not inspect.isasyncgenfunction(behavior) and not inspect.iscoroutinefunction(behavior)


class AioInterceptors(grpc.aio.ServerInterceptor):
    """Synchronous grpc.ServerInterceptors on the asyncio server, as one interceptor (one
    coroutine a call instead of one each): as in a synchronous chain, the first wraps what the
    second returned, the last sees the handler gRPC resolved."""

    def __init__(self, inner: Sequence[grpc.ServerInterceptor]) -> None:
        self.innermost_first = tuple(reversed(inner))

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        for interceptor in self.innermost_first:
            handler = interceptor.intercept_service(lambda _details, h=handler: h,
                                                    handler_call_details)
        return handler


class _GenericHandlersOnly:
    """The server as generated add_XServicer_to_server code sees it, minus method registration.
    That code registers every method besides adding the service's generic handler. The
    asyncio server then keeps one pending request per registered method (about 40 on a node)
    and waits on all of them with asyncio.wait for every incoming call, which costs the event
    loop about 30 µs a call here; registration buys nothing in return (the asyncio server asks
    for no payload with the call). Served through the generic handler, a method is found by
    one dict lookup per service."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers) -> None:
        """Not registered: the generic handler added just before serves these methods."""


def new_event_loop(kind: str = "uvloop") -> asyncio.AbstractEventLoop:
    """A new loop of `kind` (EVENT_LOOPS); asyncio's when uvloop is asked for but missing."""
    if kind not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {kind!r}: want one of {', '.join(EVENT_LOOPS)}")
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("uvloop is not installed: the gRPC server runs on asyncio's own loop")
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class AioGrpcServer:
    """The loop thread, the blocking-handler pool and the grpc.aio server on that loop.
    `_server` is created, started and stopped on the loop only; nothing else is shared."""

    def __init__(self, *, interceptors: Sequence[grpc.ServerInterceptor] = (),
                 options: Sequence[tuple[str, Any]] = (), name: str = "grpc",
                 outer: Sequence[grpc.aio.ServerInterceptor] = (),
                 event_loop: str = "uvloop") -> None:
        """`outer`: asyncio interceptors that see every handler in its final form (the call
        counter of cluster/metrics), before the others. `event_loop`: see new_event_loop."""
        self.pool = futures.ThreadPoolExecutor(max_workers=POOL_WORKERS,
                                               thread_name_prefix=name)
        self.loop = new_event_loop(event_loop)
        self.loop.set_default_executor(self.pool)  # asyncio.to_thread runs in the same pool
        self._thread = threading.Thread(target=self._run, name=f"{name}-loop", daemon=True)
        self._thread.start()
        adapted = [*outer, _PlainStreamsOnThreads(), AioInterceptors(interceptors)]
        self._server: grpc.aio.Server = self.call(self._make(adapted, list(options)))

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _make(self, interceptors: list, options: list) -> grpc.aio.Server:
        return grpc.aio.server(migration_thread_pool=self.pool, interceptors=interceptors,
                               options=options)

    def call(self, coro: Awaitable[T], timeout: float | None = 30.0) -> T:
        """Run `coro` on the loop and wait for its result (from a thread other than the loop's)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add(self, register: Callable[[grpc.aio.Server], None]) -> None:
        """`register(server)`: an add_XServicer_to_server call. Its methods are served as
        generic handlers only (see _GenericHandlersOnly)."""
        async def run() -> None:
            register(_GenericHandlersOnly(self._server))
        self.call(run())

    def add_port(self, address: str, tls: TlsSettings | None) -> int:
        async def run() -> int:
            return add_port(self._server, address, tls)
        return self.call(run())

    def start(self) -> None:
        self.call(self._server.start())

    def stop(self, grace: float | None) -> None:
        """Stop serving (calls in flight get `grace` seconds), then end the loop and the pool."""
        try:
            self.call(self._server.stop(grace), timeout=(grace or 0) + 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self.loop.close()
            self.pool.shutdown(wait=False, cancel_futures=True)
