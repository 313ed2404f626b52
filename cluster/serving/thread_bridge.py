"""Synchronous streaming handlers on the asyncio server, with the threaded server's context.

gRPC's own bridge for a plain (non-async) streaming handler on a grpc.aio server hands it a
context without `is_active()` or `cancel()`, which the replication stream and Telemetry rely on
(a master cancels the stream of a slave that stopped reading). So the node's server runs every
plain streaming handler through `threaded_stream` instead:

- the handler runs in the server's pool, as on a threaded server, with a `ThreadContext`;
- the client's requests are read on the loop and handed over through a queue (unbounded: what
  a peer sends on these streams are acks and settings, small and rate-limited by what it is sent);
- responses go back through a bounded queue (OUTBOX): a handler whose client stops reading
  blocks in `emit` like it blocked in gRPC's flow control, until the call ends;
- `ThreadContext.abort` raises in the handler's thread and the loop ends the call with that
  status; `cancel()` ends it with CANCELLED, dropping a write that flow control holds.
Unary handlers need none of this: gRPC runs them in the pool itself.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, AsyncIterator, Callable, Iterator

import grpc

OUTBOX = 16
_END = object()


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _CallEnded(Exception):
    """The call ended (cancelled, the client went away) while the handler had more to send."""


class ThreadContext:
    """What a synchronous handler may ask of its call from the pool thread. Everything about the
    peer is read on the loop when the call starts; `ended` (a threading.Event) is set by the
    loop when the call ends; `code`/`details` are applied by the loop at the end."""

    def __init__(self, context: grpc.aio.ServicerContext, loop: asyncio.AbstractEventLoop
                 ) -> None:
        self._context, self._loop = context, loop
        self._peer = context.peer()
        self._metadata = context.invocation_metadata()
        self._auth = context.auth_context()
        self.ended = threading.Event()
        self.cancel_requested = False
        self.on_cancel: Callable[[], None] = lambda: None
        self._cancel_waiters: list[asyncio.Future] = []
        self.code: grpc.StatusCode | None = None
        self.details: str | None = None

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self):
        return self._metadata

    def auth_context(self):
        return self._auth

    def time_remaining(self) -> float | None:
        return self._context.time_remaining()

    def is_active(self) -> bool:
        return not self.ended.is_set() and not self.cancel_requested

    def cancel(self) -> None:
        """End the call with CANCELLED, also while a write waits for a client that stopped
        reading (the pending write is dropped)."""
        self.cancel_requested = True
        self._loop.call_soon_threadsafe(self._cancel_on_loop)

    def _cancel_on_loop(self) -> None:
        self.on_cancel()
        for future in self._cancel_waiters:
            if not future.done():
                future.set_result(None)

    def cancel_event(self) -> asyncio.Future:
        """On the loop: a future done once cancel() was called."""
        future = self._loop.create_future()
        if self.cancel_requested:
            future.set_result(None)
        else:
            self._cancel_waiters.append(future)
            future.add_done_callback(self._cancel_waiters.remove)
        return future

    def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise _Aborted(code, details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


class _Outbox:
    """Responses from the handler's thread to the loop: a bounded thread-safe queue and an
    asyncio.Event the thread sets (through the loop) after each put."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ended: threading.Event) -> None:
        self._items: queue.Queue = queue.Queue(OUTBOX)
        self._loop = loop
        self._ended = ended
        self.ready = asyncio.Event()

    def emit(self, item: Any) -> None:
        """From the thread; blocks while the queue is full, fails once the call ended."""
        while True:
            if self._ended.is_set():
                raise _CallEnded()
            try:
                self._items.put(item, timeout=0.5)
                break
            except queue.Full:
                continue
        self._loop.call_soon_threadsafe(self.ready.set)

    async def drain(self, stop: Callable[[], bool]) -> AsyncIterator[Any]:
        """On the loop: the items in order, up to _END or until stop() says so."""
        while not stop():
            self.ready.clear()
            while True:
                try:
                    item = self._items.get_nowait()
                except queue.Empty:
                    break
                if item is _END:
                    return
                yield item
            await self.ready.wait()


def _requests(inbox: queue.Queue, ended: threading.Event) -> Iterator[Any]:
    while True:
        item = inbox.get()
        if item is _END or ended.is_set():
            return
        yield item


def threaded_stream(behavior: Callable, stream_requests: bool) -> Callable:
    """A coroutine handler running the plain streaming `behavior` (request or request iterator,
    context) -> response iterator in the loop's default executor, writing its responses itself
    (context.write), so it can stop a write that flow control holds when the call is cancelled."""

    async def handler(request_or_iterator, context):
        loop = asyncio.get_running_loop()
        tc = ThreadContext(context, loop)
        outbox = _Outbox(loop, tc.ended)
        tc.on_cancel = outbox.ready.set
        inbox: queue.Queue = queue.Queue()
        reader = None
        if stream_requests:
            async def read() -> None:
                try:
                    async for request in request_or_iterator:
                        inbox.put(request)
                except Exception:  # the call ended: the handler sees its requests end
                    pass
                finally:
                    inbox.put(_END)
            reader = asyncio.ensure_future(read())
            argument: Any = _requests(inbox, tc.ended)
        else:
            argument = request_or_iterator

        def run() -> _Aborted | None:
            responses: Any = ()
            try:
                responses = behavior(argument, tc)
                for response in responses:
                    outbox.emit(response)
                return None
            except _Aborted as e:
                return e
            except _CallEnded:
                return None
            finally:
                close = getattr(responses, "close", None)
                if close is not None:
                    close()  # a generator's own cleanup runs here, in this thread
                try:
                    outbox.emit(_END)
                except _CallEnded:
                    pass

        job = loop.run_in_executor(None, run)
        try:
            async for response in outbox.drain(lambda: tc.cancel_requested):
                if not await _write(context, response, tc):
                    return  # the client is gone or the handler cancelled: nobody to answer
            if tc.cancel_requested:
                tc.ended.set()
                await context.abort(grpc.StatusCode.CANCELLED, "cancelled by the server")
            aborted = await job
            if aborted is not None:
                await context.abort(aborted.code, aborted.details)
            if tc.code is not None:
                context.set_code(tc.code)
            if tc.details is not None:
                context.set_details(tc.details)
        finally:
            tc.ended.set()
            inbox.put(_END)
            if reader is not None:
                reader.cancel()
    return handler


async def _write(context, response: Any, tc: ThreadContext) -> bool:
    """Write one response; False when the call ended first, or the handler cancelled it
    while the write waited (a client that stopped reading holds a write forever)."""
    write = asyncio.ensure_future(context.write(response))
    cancelled = tc.cancel_event()
    try:
        done, _ = await asyncio.wait({write, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancelled.cancel()
    if write not in done:
        write.cancel()
        return False
    try:
        write.result()
    except Exception:  # the call ended under the write (the client went away)
        return False
    return True
