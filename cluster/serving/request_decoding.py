"""Requests that are not a valid protobuf of their method's type get INVALID_ARGUMENT naming
the type and the parse error, instead of gRPC's own answer (INTERNAL "Exception deserializing
request!", which says the server failed when the client sent garbage).

`UndecodableRequestInterceptor` wraps every method handler of the node's server: its request
deserializer returns an `Undecodable` marker instead of raising, and the handler refuses the
marker before the servicer sees it. For a stream of requests the refusal ends the stream at
the bad message (the servicer sees the client's stream end) with the status set.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator

import grpc
import grpc.aio

from .handler_cache import WrapCache


@dataclass(frozen=True)
class Undecodable:
    """What a request deserializer returns for bytes that do not parse."""
    type_name: str
    error: str

    @property
    def message(self) -> str:
        return f"the request is not a valid {self.type_name} protobuf: {self.error}"


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None
    type_name = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    type_name = type_name.full_name if type_name is not None else "request"

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as e:  # any parse failure: the client's bytes, not our bug
            return Undecodable(type_name, str(e) or type(e).__name__)
    return decode


def _checked_unary(behavior):
    if inspect.iscoroutinefunction(behavior):  # a handler on the event loop (grpc_server.py)
        async def handle_async(request, context):
            if isinstance(request, Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            return await behavior(request, context)
        return handle_async
    if inspect.isasyncgenfunction(behavior):
        async def stream_async(request, context):
            if isinstance(request, Undecodable):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            async for response in behavior(request, context):
                yield response
        return stream_async

    def handle(request, context):
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return behavior(request, context)
    return handle


def _checked_stream(behavior):
    if inspect.iscoroutinefunction(behavior):  # a stream served on the event loop
        async def handle_async(request_iterator, context):
            return await behavior(_until_undecodable_async(request_iterator, context), context)
        return handle_async

    def handle(request_iterator, context):
        return behavior(_until_undecodable(request_iterator, context), context)
    return handle


def _until_undecodable(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    for request in requests:
        if isinstance(request, Undecodable):
            context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
            context.set_details(request.message)
            return
        yield request


class UndecodableRequestInterceptor(grpc.ServerInterceptor):
    """Wraps each method's handler so an undecodable request is answered INVALID_ARGUMENT
    (the module docstring). Holds only the WrapCache of wrapped handlers (no lock, see
    handler_cache.py)."""

    def __init__(self) -> None:
        self._wrapped = WrapCache(lambda handler, _method: _checked(handler))

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return self._wrapped.get(handler, handler_call_details.method)


def _checked(handler):
    wrapped = {"request_deserializer": _safe(handler.request_deserializer)}
    for kind in ("unary_unary", "unary_stream"):
        if getattr(handler, kind) is not None:
            wrapped[kind] = _checked_unary(getattr(handler, kind))
    for kind in ("stream_unary", "stream_stream"):
        if getattr(handler, kind) is not None:
            wrapped[kind] = _checked_stream(getattr(handler, kind))
    return handler._replace(**wrapped)


async def _until_undecodable_async(requests: AsyncIterator[Any],
                                   context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, Undecodable):
            context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
            context.set_details(request.message)
            return
        yield request
