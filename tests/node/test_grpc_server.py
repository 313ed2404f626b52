"""The node's asyncio gRPC server (cluster/serving/grpc_server.py, thread_bridge.py) with real
calls on 127.0.0.1: plain handlers run in the pool and async ones on the loop; a plain streaming
handler gets the threaded server's context (is_active, cancel, abort with its code); a handler
whose client stops reading blocks until the call ends and is then closed (its cleanup runs);
synchronous interceptors still refuse calls."""
from __future__ import annotations

import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import HealthServicer

from cluster.metrics.call_counter import CallCounter
from cluster.config.node_config import EVENT_LOOPS
from cluster.serving.grpc_server import AioGrpcServer, new_event_loop
from cluster.serving.handler_cache import WrapCache
from tests.support.waiting import wait_until

SERVICE = "test.Bridge"


def _identity(b: bytes) -> bytes:
    return b


class Handlers:
    def __init__(self) -> None:
        self.threads: dict[str, int] = {}
        self.cleaned_up = threading.Event()
        self.sent = 0
        self.active_after_cancel: bool | None = None

    def plain(self, request: bytes, context) -> bytes:
        self.threads["plain"] = threading.get_ident()
        return b"plain:" + request

    async def on_loop(self, request: bytes, context) -> bytes:
        self.threads["loop"] = threading.get_ident()
        return b"loop:" + request

    def echo(self, requests, context):
        """Echoes each request; b"abort" aborts, b"cancel" cancels the call itself."""
        for r in requests:
            if r == b"abort":
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "asked to abort")
            if r == b"cancel":
                context.cancel()
                wait_until(lambda: not context.is_active(), 5, "the call to end")
                self.active_after_cancel = context.is_active()
                return
            yield b"echo:" + r + context.peer().encode()[:0]

    def flood(self, request: bytes, context):
        """Sends until the call ends; its cleanup must run when it does."""
        try:
            while True:
                yield b"x" * 65536
                self.sent += 1
        finally:
            self.cleaned_up.set()


class Refuse(grpc.ServerInterceptor):
    def intercept_service(self, continuation, details):
        if dict(details.invocation_metadata or ()).get("refuse") == "1":
            def deny(request, context):
                context.abort(grpc.StatusCode.PERMISSION_DENIED, "refused by the interceptor")
            return grpc.unary_unary_rpc_method_handler(deny)
        return continuation(details)


@pytest.fixture(params=EVENT_LOOPS)
def served(request):
    """The server on each event loop a node may run (serverEventLoop): every test holds on both."""
    handlers = Handlers()
    server = AioGrpcServer(interceptors=[Refuse()], name="test-grpc", event_loop=request.param)
    generic = grpc.method_handlers_generic_handler(SERVICE, {
        "Plain": grpc.unary_unary_rpc_method_handler(handlers.plain, _identity, _identity),
        "OnLoop": grpc.unary_unary_rpc_method_handler(handlers.on_loop, _identity, _identity),
        "Echo": grpc.stream_stream_rpc_method_handler(handlers.echo, _identity, _identity),
        "Flood": grpc.unary_stream_rpc_method_handler(handlers.flood, _identity, _identity),
    })
    server.add(lambda s: s.add_generic_rpc_handlers((generic,)))
    port = server.add_port("127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield handlers, channel, server
    finally:
        channel.close()
        server.stop(0.5)
        assert not server._thread.is_alive()


def _call(channel, method: str, kind: str):
    return getattr(channel, kind)(f"/{SERVICE}/{method}", request_serializer=_identity,
                                  response_deserializer=_identity)


def test_plain_handlers_run_in_the_pool_async_ones_on_the_loop(served):
    handlers, channel, server = served
    assert _call(channel, "Plain", "unary_unary")(b"a", timeout=5) == b"plain:a"
    assert _call(channel, "OnLoop", "unary_unary")(b"b", timeout=5) == b"loop:b"
    assert handlers.threads["loop"] == server._thread.ident
    assert handlers.threads["plain"] != server._thread.ident


def test_the_server_runs_on_the_event_loop_asked_for(served, request):
    _, channel, server = served
    kind = request.node.callspec.params["served"]
    assert type(server.loop).__module__.split(".")[0] == kind
    assert _call(channel, "OnLoop", "unary_unary")(b"c", timeout=5) == b"loop:c"


def test_an_unknown_event_loop_is_refused():
    with pytest.raises(ValueError, match="unknown event loop 'tokio'"):
        new_event_loop("tokio")


def test_a_plain_stream_gets_its_requests_and_answers_in_order(served):
    _, channel, _ = served
    answers = list(_call(channel, "Echo", "stream_stream")(iter([b"1", b"2", b"3"]), timeout=5))
    assert answers == [b"echo:1", b"echo:2", b"echo:3"]


def test_abort_in_a_plain_stream_ends_the_call_with_its_code(served):
    _, channel, _ = served
    call = _call(channel, "Echo", "stream_stream")(iter([b"1", b"abort", b"2"]), timeout=5)
    assert next(call) == b"echo:1"
    with pytest.raises(grpc.RpcError) as e:
        next(call)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.details() == "asked to abort"


def test_cancel_from_the_handler_ends_the_call_and_is_active_says_so(served):
    handlers, channel, _ = served
    call = _call(channel, "Echo", "stream_stream")(iter([b"cancel"]), timeout=5)
    with pytest.raises(grpc.RpcError) as e:
        list(call)
    assert e.value.code() == grpc.StatusCode.CANCELLED
    wait_until(lambda: handlers.active_after_cancel is not None, 5, "the handler to finish")
    assert handlers.active_after_cancel is False


def test_a_handler_whose_client_stopped_reading_is_closed_when_the_call_ends(served):
    handlers, channel, _ = served
    call = _call(channel, "Flood", "unary_stream")(b"", timeout=30)
    next(call)  # then read nothing more: flow control and the bounded outbox stop the handler
    samples = [-1]

    def stalled() -> bool:
        samples.append(handlers.sent)
        return samples[-1] == samples[-2] > 0
    wait_until(stalled, 20, "the handler to stall", interval=0.5)
    call.cancel()
    assert handlers.cleaned_up.wait(5), "the generator's cleanup did not run"


def test_a_synchronous_interceptor_still_refuses(served):
    _, channel, _ = served
    with pytest.raises(grpc.RpcError) as e:
        _call(channel, "OnLoop", "unary_unary")(b"x", timeout=5, metadata=(("refuse", "1"),))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED


class Mark(grpc.ServerInterceptor):
    """Appends its name to a plain unary answer: shows the order of the synchronous chain."""

    def __init__(self, name: bytes) -> None:
        self.name = name

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or handler.unary_unary is None or details.method.endswith("OnLoop"):
            return handler
        inner, name = handler.unary_unary, self.name
        return handler._replace(unary_unary=lambda request, context: inner(request, context) + name)


def test_synchronous_interceptors_chain_in_order_and_decide_per_call():
    """The synchronous interceptors run as one chain (AioInterceptors): the first wraps what
    the second returned. A per-call decision (a refusal) holds call after call although the
    outer interceptors keep their wrapping of each method's handler (handler_cache.py)."""
    handlers = Handlers()
    counter = CallCounter()
    server = AioGrpcServer(interceptors=[Refuse(), Mark(b"1"), Mark(b"2")], outer=[counter],
                           name="test-chain")
    generic = grpc.method_handlers_generic_handler(SERVICE, {
        "Plain": grpc.unary_unary_rpc_method_handler(handlers.plain, _identity, _identity),
        "OnLoop": grpc.unary_unary_rpc_method_handler(handlers.on_loop, _identity, _identity)})
    server.add(lambda s: s.add_generic_rpc_handlers((generic,)))
    port = server.add_port("127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        plain, on_loop = _call(channel, "Plain", "unary_unary"), _call(channel, "OnLoop",
                                                                       "unary_unary")
        for refuse in ("0", "1", "0", "1", "0"):
            metadata = (("refuse", refuse),)
            if refuse == "1":
                for call in (plain, on_loop):
                    with pytest.raises(grpc.RpcError) as e:
                        call(b"x", timeout=5, metadata=metadata)
                    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            else:
                assert plain(b"x", timeout=5, metadata=metadata) == b"plain:x21"
                assert on_loop(b"x", timeout=5, metadata=metadata) == b"loop:x"
        counts = counter.snapshot()
        for method in ("Plain", "OnLoop"):
            assert counts[(f"/{SERVICE}/{method}", "OK")] == 3
            assert counts[(f"/{SERVICE}/{method}", "PERMISSION_DENIED")] == 2
    finally:
        channel.close()
        server.stop(0.5)


def test_a_wrap_cache_wraps_each_handler_once_and_a_new_one_again():
    made = []
    cache = WrapCache(lambda handler, method: made.append((handler, method)) or (handler, "w"))
    first, second = object(), object()
    assert cache.get(first, "/s/M") == (first, "w")
    assert cache.get(first, "/s/M") == (first, "w") and len(made) == 1
    assert cache.get(second, "/s/M") == (second, "w") and len(made) == 2  # replaced
    assert cache.get(first, "/s/N") == (first, "w") and len(made) == 3  # per method


def test_a_generated_servicer_is_served_through_its_generic_handler():
    """add() gives generated add_XServicer_to_server code a server that keeps the generic
    handler and drops the method registration (registered methods cost the asyncio server an
    asyncio.wait over all of them per call): the methods are still served."""
    server = AioGrpcServer(name="test-generic")
    health = HealthServicer()
    health.set("svc", health_pb2.HealthCheckResponse.SERVING)
    server.add(lambda s: health_pb2_grpc.add_HealthServicer_to_server(health, s))
    port = server.add_port("127.0.0.1:0", None)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service="svc"), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()
        server.stop(0.5)
