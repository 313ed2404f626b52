"""One gRPC channel to a node (or a group of nodes) of apache.rocketmq.v2.MessagingService,
with the metadata the official clients send, a route cache and typed errors.

Endpoints are "host:port" or several "a:p;b:p". Several IPv4 addresses become one gRPC target
"ipv4:a:p,b:p" (sorted, like the official clients), so gRPC's pick-first policy stays on the
first address that connects; several host names are refused (the official clients refuse them
too). Every node of a group accepts every call (a slave forwards writes and consumer calls to its
master), so the client talks to the endpoints it was given and uses routes only for the queue
list of a topic.

Every call carries x-mq-language=PYTHON, x-mq-protocol=GRPC_V2, x-mq-client-id,
x-mq-namespace, x-mq-date-time, x-mq-request-id and, with an access key, the MQv2-HMAC-SHA1
authorization (cluster/security/signature.py `sign`). Answers are v2 statuses: `check_status`
turns them into ClientError; a call without an answer raises TransportError.
"""
from __future__ import annotations

import ipaddress
import itertools
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.experimental

from cluster.security.signature import sign
from proto import batch_receive_pb2_grpc as br_grpc
from proto.batch_receive_methods import BATCH_RECEIVE_METHODS
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from proto.apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from cluster.client.client_errors import TransportError, check
from cluster.security.tls import ClientTls, open_channel

CLIENT_VERSION = "rmqstore-client-0.1"
SERVICE = "apache.rocketmq.v2.MessagingService"
_client_index = itertools.count()


def _base36(n: int) -> str:
    chars = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = chars[r] + out
        if not n:
            return out


def new_client_id() -> str:
    """hostname@pid@index@base36(time_ns), the official clients' layout."""
    return f"{socket.gethostname()}@{os.getpid()}@{next(_client_index)}@{_base36(time.time_ns())}"


def parse_endpoints(endpoints: str) -> tuple[str, ...]:
    """("host:port", ...) of "a:p;b:p"; ValueError for anything else."""
    out = []
    for part in endpoints.split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"endpoint {part!r} is not host:port")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise ValueError(f"no endpoint in {endpoints!r}")
    return tuple(dict.fromkeys(out))


def _is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the nodes. `request_timeout` (seconds) is the deadline of one call; long
    polls add their polling time to it. `route_ttl`: seconds a topic's route is reused. `tls`:
    the CA (and client certificate) of nodes serving TLS; None: plaintext. `batch_receive`:
    receive through ReceiveMessages (proto/batch_receive.proto, one response per receive)
    and ack with the next receive (AckAndReceive) where the server has them; False: always
    the v2 ReceiveMessage stream and AckMessage."""
    endpoints: str
    namespace: str = ""
    access_key: str = ""
    secret_key: str = ""
    request_timeout: float = 5.0
    client_id: str = ""
    route_ttl: float = 30.0
    max_message_bytes: int = 64 * 1024 * 1024  # gRPC send/receive limits of the channel
    tls: ClientTls | None = None
    batch_receive: bool = True

    def __post_init__(self) -> None:
        addresses = parse_endpoints(self.endpoints)
        if len(addresses) > 1 and not all(_is_ipv4(a.rpartition(":")[0]) for a in addresses):
            raise ValueError(f"several endpoints must all be IPv4 addresses: {self.endpoints!r}")
        if not self.request_timeout > 0:
            raise ValueError(f"request_timeout must be > 0, not {self.request_timeout}")
        if self.route_ttl < 0:
            raise ValueError(f"route_ttl must be >= 0, not {self.route_ttl}")
        if self.secret_key and not self.access_key:
            raise ValueError("a secret_key needs its access_key")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes {self.max_message_bytes} is too small")
        if not self.client_id:
            object.__setattr__(self, "client_id", new_client_id())

    @property
    def addresses(self) -> tuple[str, ...]:
        return parse_endpoints(self.endpoints)

    @property
    def target(self) -> str:
        addresses = self.addresses
        if len(addresses) == 1:
            return addresses[0]
        return "ipv4:" + ",".join(sorted(addresses))


class Connection:
    """A channel, its stub and the route cache. Thread-safe; share one per process and endpoint
    set. Closing it ends every call in progress."""

    def __init__(self, config: ClientConfig | str) -> None:
        self.config = config if isinstance(config, ClientConfig) else ClientConfig(config)
        limit = self.config.max_message_bytes
        self.channel = open_channel(self.config.target, self.config.tls, [
            ("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit),
            # Server streams (ReceiveMessage, PullMessage) are read to their end by the calling
            # thread (`stream`), so that thread can wait on the call's own completion queue
            # (an experimental option of gRPC Python). Without it gRPC hands every response
            # over from its channel spin thread: 109 instead of 65 µs of client CPU per
            # streamed message (docs/performance/history.md, "The client's side of a stream").
            (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)])
        self.stub = s_grpc.MessagingServiceStub(self.channel)
        self._batch_stub = br_grpc.BatchReceiveStub(self.channel)
        # the BatchReceive methods to ask for: none when switched off; one the server lacks
        # (UNIMPLEMENTED) is dropped
        self._batch_methods = set(BATCH_RECEIVE_METHODS) if self.config.batch_receive else set()
        self._routes: dict[str, tuple[float, list[d.MessageQueue]]] = {}
        self._routes_lock = threading.Lock()
        self._raw: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._closed = False

    # -- plumbing -----------------------------------------------------------------------------
    def metadata(self) -> list[tuple[str, str]]:
        c = self.config
        return [*sign(c.access_key, c.secret_key, c.client_id),
                ("x-mq-namespace", c.namespace), ("x-mq-client-version", CLIENT_VERSION)]

    def resource(self, name: str) -> d.Resource:
        return d.Resource(name=name, resource_namespace=self.config.namespace)

    def timeout(self, timeout: float | None) -> float:
        return self.config.request_timeout if timeout is None else timeout

    def call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        """A unary call's response (its status is not checked here)."""
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout(timeout),
                                              metadata=self.metadata())
        except grpc.RpcError as e:
            raise TransportError.from_rpc_error(e, method, self.config.target) from None

    def future(self, method: str, request: Any, timeout: float | None = None) -> grpc.Future:
        """A unary call in flight (grpc future); errors surface from its result()."""
        return getattr(self.stub, method).future(request, timeout=self.timeout(timeout),
                                                 metadata=self.metadata())

    def raw_future(self, method: str, payload: bytes, response_cls: Any,
                   timeout: float | None = None) -> grpc.Future:
        """A unary call whose request is already serialized (the batching producer joins
        messages serialized by their senders' threads instead of copying them into a request)."""
        multicallable = self._raw.get(method)
        if multicallable is None:
            multicallable = self.channel.unary_unary(
                f"/{SERVICE}/{method}", request_serializer=None,
                response_deserializer=response_cls.FromString)
            self._raw[method] = multicallable
        return multicallable.future(payload, timeout=self.timeout(timeout), metadata=self.metadata())

    def stream(self, method: str, request: Any, timeout: float | None = None) -> list[Any]:
        """Every response of a server-streaming call, read until the server closes it."""
        try:
            return list(getattr(self.stub, method)(request, timeout=self.timeout(timeout),
                                                   metadata=self.metadata()))
        except grpc.RpcError as e:
            raise TransportError.from_rpc_error(e, method, self.config.target) from None

    def batch_call(self, method: str, request: Any, timeout: float | None = None) -> Any | None:
        """A BatchReceive call's answer (proto/batch_receive.proto: ReceiveMessages, the v2
        receive in one response, or AckAndReceive), or None when batch receiving is switched
        off or the server does not serve `method` (UNIMPLEMENTED, remembered): the caller then
        uses the v2 calls."""
        if method not in self._batch_methods:
            return None
        try:
            return getattr(self._batch_stub, method)(request, timeout=self.timeout(timeout),
                                                     metadata=self.metadata())
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.UNIMPLEMENTED:
                self.batch_unserved(method)
                return None
            raise TransportError.from_rpc_error(e, method, self.config.target) from None

    def batch_future(self, method: str, request: Any, timeout: float | None = None
                     ) -> grpc.Future | None:
        """`batch_call` in flight: its future, or None where batch_call would answer None
        without asking (switched off, or the server is known not to serve `method`). A server
        that does not serve it fails the future with UNIMPLEMENTED, which changed nothing
        there: hand that error to `batch_unserved` and use the v2 calls."""
        if method not in self._batch_methods:
            return None
        return getattr(self._batch_stub, method).future(request, timeout=self.timeout(timeout),
                                                        metadata=self.metadata())

    def batch_unserved(self, method: str) -> None:
        """The server answered `method` UNIMPLEMENTED: not asked again (see batch_call)."""
        self._batch_methods.discard(method)

    # -- routes -------------------------------------------------------------------------------
    def route(self, topic: str, refresh: bool = False) -> list[d.MessageQueue]:
        """The topic's queues (QueryRoute; a master auto-creates the topic when allowed),
        reused for route_ttl seconds."""
        now = time.monotonic()
        if not refresh:
            with self._routes_lock:
                cached = self._routes.get(topic)
            if cached is not None and now - cached[0] < self.config.route_ttl:
                return cached[1]
        endpoints = d.Endpoints(scheme=d.IPv4)
        for address in self.config.addresses:
            host, _, port = address.rpartition(":")
            if not _is_ipv4(host):
                endpoints.scheme = d.DOMAIN_NAME
            endpoints.addresses.append(d.Address(host=host, port=int(port)))
        answer = self.call("QueryRoute", s.QueryRouteRequest(topic=self.resource(topic),
                                                              endpoints=endpoints))
        check(answer.status, f"route of topic {topic}")
        queues = list(answer.message_queues)
        with self._routes_lock:
            self._routes[topic] = (now, queues)
        return queues

    def forget_route(self, topic: str) -> None:
        with self._routes_lock:
            self._routes.pop(topic, None)

    def readable_queues(self, topic: str) -> list[int]:
        return sorted(q.id for q in self.route(topic) if q.permission in (d.READ, d.READ_WRITE))

    def heartbeat(self, group: str = "", client_type: int = d.PRODUCER) -> None:
        request = s.HeartbeatRequest(client_type=client_type)
        if group:
            request.group.CopyFrom(self.resource(group))
        check(self.call("Heartbeat", request).status, "heartbeat")

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.channel.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
