"""Load generators of bench_messaging.py: client-library send loops, sequential latency,
SimpleConsumer receive/ack, the official Python client in a subprocess, and a bare gRPC
MessagingService (no store) for the ceilings measured in the same run.

Every message: 1 KiB body, a tag, one key, the client's message id (like bench_store's).
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass

import grpc
import grpc.experimental

from cluster.client import (BatchingConfig, BatchingProducer, ClientConfig, ClientError,
                            Connection, Message, Producer, PullConsumer, SimpleConsumer)
from cluster.client.producer import NO_RETRY
from proto import batch_receive_pb2 as br
from proto import batch_receive_pb2_grpc as br_grpc
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from proto.apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from .host_load import CpuWindow

BODY = os.urandom(1024)
OFFICIAL_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "official_send_tool.py")


@dataclass
class Rate:
    value: float  # messages (or calls) per second
    errors: int = 0
    first_error: str = ""
    count: int = 0  # messages counted (set where the caller needs it: CPU per message)


def connect(endpoint: str, batch_receive: bool = True) -> Connection:
    """batch_receive: SimpleConsumer receives through ReceiveMessages (one response per
    receive, proto/batch_receive.proto); False: the v2 ReceiveMessage stream."""
    return Connection(ClientConfig(endpoint, request_timeout=30, batch_receive=batch_receive))


def _measure(counts: list[int], warmup: float, seconds: float, probe=None) -> float:
    """Messages per second counted over `seconds` after `warmup`. `probe` (a context manager:
    CPU times or py-spy of the nodes) is entered for exactly that window, then told how many
    messages it saw (`probe.messages`)."""
    time.sleep(warmup)
    with probe if probe is not None else contextlib.nullcontext():
        c0, t0 = sum(counts), time.perf_counter()
        time.sleep(seconds)
        done, dt = sum(counts) - c0, time.perf_counter() - t0
    if probe is not None:
        probe.messages = done
    return done / dt


def _rate_of_workers(run, threads: int, stop: threading.Event, counts: list[int],
                     warmup: float, seconds: float, probe=None) -> float:
    """Start `threads` threads of run(t), measure their rate (_measure), then stop and join
    them."""
    workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    try:
        return _measure(counts, warmup, seconds, probe)
    finally:
        stop.set()
        for w in workers:
            w.join(60)


def _messages(topic: str, t: int, start: int, n: int) -> list[Message]:
    return [Message(topic, BODY, tag="bench", keys=f"k{t}-{start + i}") for i in range(n)]


def batched_send_rate(endpoint: str, topic: str, threads: int, batch: int, seconds: float,
                      warmup: float = 0.5, probe=None) -> Rate:
    """`threads` Producers on one connection, each calling send_batch(batch) in a loop."""
    with connect(endpoint) as conn:
        Producer(conn).send(Message(topic, BODY))  # route + auto-create before the clock
        counts, stop, errors = [0] * threads, threading.Event(), []

        def run(t: int) -> None:
            producer = Producer(conn, retry=NO_RETRY)
            i = 0
            while not stop.is_set():
                try:
                    producer.send_batch(_messages(topic, t, i, batch))
                    counts[t] += batch
                except ClientError as e:
                    errors.append(e)
                i += batch

        rate = _rate_of_workers(run, threads, stop, counts, warmup, seconds, probe)
    return Rate(rate, len(errors), str(errors[0]) if errors else "")


def batching_producer_rate(endpoint: str, topic: str, threads: int, seconds: float,
                           config: BatchingConfig, warmup: float = 0.5, pending_max: int = 4096,
                           probe=None) -> Rate:
    """`threads` callers of one BatchingProducer.submit, each with up to `pending_max`
    unanswered messages (pending_max); a message counts when its receipt arrived."""
    with connect(endpoint) as conn:
        Producer(conn).send(Message(topic, BODY))
        producer = BatchingProducer(conn, config, retry=NO_RETRY)
        counts, stop, errors = [0] * threads, threading.Event(), []

        def run(t: int) -> None:
            pending: deque = deque()
            i = 0
            while not stop.is_set():
                pending.append(producer.submit(
                    Message(topic, BODY, tag="bench", keys=f"b{t}-{i}")))
                i += 1
                while len(pending) > pending_max or (pending and pending[0].done()):
                    try:
                        pending.popleft().result()
                        counts[t] += 1
                    except ClientError as e:
                        errors.append(e)

        try:
            rate = _rate_of_workers(run, threads, stop, counts, warmup, seconds, probe)
        finally:
            requests, messages = producer.requests, sum(counts)
            producer.close()
    note = f"{messages / max(requests, 1):.0f} messages per request on average"
    return Rate(rate, len(errors), str(errors[0]) if errors else note)


def send_latencies(endpoint: str, topic: str, n: int, warmup: int = 50) -> list[float]:
    """Milliseconds of n sequential single-message sends (Producer.send)."""
    with connect(endpoint) as conn:
        producer = Producer(conn, retry=NO_RETRY)
        out = []
        for i in range(warmup + n):
            msg = Message(topic, BODY, tag="bench", keys=f"l{i}")
            t0 = time.perf_counter()
            producer.send(msg)
            if i >= warmup:
                out.append((time.perf_counter() - t0) * 1000)
    return out


def fill(endpoint: str, topic: str, n: int) -> None:
    """n messages (untimed), then wait until the node dispatched all of them."""
    with connect(endpoint) as conn:
        with BatchingProducer(conn, BatchingConfig(max_messages=256)) as producer:
            pending = [producer.submit(Message(topic, BODY, tag="bench", keys=f"f{i}"))
                       for i in range(n)]
            for f in pending:
                f.result(60)
        pc = PullConsumer(conn, "bench-fill")
        deadline = time.monotonic() + 60
        while sum(pc.query_offset(topic, q, "END") for q in pc.queues(topic)) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: not every message was dispatched within 60 s")
            time.sleep(0.05)


# How a consumer receives and acks: form -> (ClientConfig.batch_receive, acks with the next
# receive). "one": ReceiveMessages + AckMessage; "next": AckAndReceive, each batch acked by
# the next receive; "stream": the v2 ReceiveMessage stream + AckMessage.
RECEIVE_FORMS = {"one": (True, False), "next": (True, True), "stream": (False, False)}


def receive_ack_rate(endpoint: str, topic: str, total: int, threads: int, batch: int,
                     limit_s: float, form: str = "one") -> Rate | None:
    """SimpleConsumers (one group) receive `batch` and ack them with one AckMessage, until
    `total` were acked or `limit_s` passed; None when the server answers NOT_IMPLEMENTED.
    `form` (RECEIVE_FORMS): how they receive and ack; with "next" a batch counts once the
    next call's answer says it was acked, from when that call was sent.
    The rate runs to the last ack, not to the threads' end: once the backlog is handed out,
    a thread's receive long-polls an empty topic (1 s) before it sees the total reached, and
    that idle tail halved the figure of a quick run (5,000 messages)."""
    batch_receive, ack_with_next = RECEIVE_FORMS[form]
    with connect(endpoint, batch_receive) as conn:
        probe = SimpleConsumer(conn, "bench-probe", {topic: "*"}, await_duration=0)
        try:
            probe.receive(1, 30)
        except ClientError as e:
            if e.code == d.NOT_IMPLEMENTED:
                return None
            raise
        counts, received, errors = [0] * threads, [0] * threads, []
        start, deadline = time.perf_counter(), time.monotonic() + limit_s
        last_ack = [start] * threads  # per thread: when its last counted ack came back

        def run(t: int) -> None:
            consumer = SimpleConsumer(conn, "bench-group", {topic: "*"}, await_duration=1)
            unacked: list = []  # "next": the previous answer, acked by the next call
            while sum(counts) < total and time.monotonic() < deadline:
                try:
                    if ack_with_next:
                        # The call applies the ack first but answers after its receive: once
                        # the others drained the backlog, that receive long-polls (1 s). So
                        # the ack counts from when it was sent, and the last batch is acked
                        # at once.
                        sent = time.perf_counter()
                        results, got = consumer.ack_and_receive(unacked, batch, 30)
                        acked, unacked = unacked, got
                        received[t] += len(got)
                        if unacked and sum(received) >= total:
                            results += consumer.ack_many(unacked)
                            acked, unacked, sent = acked + unacked, [], time.perf_counter()
                    else:
                        got = consumer.receive(batch, 30)
                        results, acked = (consumer.ack_many(got), got) if got else ([], [])
                    if not acked:
                        continue
                    failed = [e for e in results if e is not None]
                    errors.extend(failed)
                    counts[t] += len(acked) - len(failed)
                    last_ack[t] = sent if ack_with_next else time.perf_counter()
                except ClientError as e:
                    errors.append(e)
            if unacked:  # handed out after the total was reached: not counted
                consumer.ack_many(unacked)

        workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(limit_s + 60)
        elapsed = max(last_ack) - start
    return Rate(sum(counts) / elapsed if elapsed > 0 else 0.0, len(errors), str(errors[0]) if errors else "",
                count=sum(counts))


def official_send(endpoint: str, topic: str, count: int) -> dict:
    """The official client's sequential sends, in a subprocess with HOME in a temp dir."""
    home = tempfile.mkdtemp(prefix="official-home-")
    env = {**os.environ, "HOME": home}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.run([sys.executable, OFFICIAL_TOOL], capture_output=True, text=True,
                              env=env, timeout=600, input=json.dumps(
                                  {"endpoint": endpoint, "topic": topic, "count": count}))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else
                f"exit {proc.returncode}"}
    return json.loads(proc.stdout)


# -- the bare service: gRPC and protobuf, no store ---------------------------------------------
class BareServicer(s_grpc.MessagingServiceServicer):
    """Answers SendMessage with one OK entry per message (ids from the request), QueryRoute
    with four queues, ReceiveMessage with `batch_size` prebuilt 1 KiB messages (one response
    each, as the v2 API streams them; ReceiveMessages of proto/batch_receive.proto: all in one
    response), AckMessage with one OK entry per entry and AckAndReceive with both: what a node
    answers, without converting, storing, replicating or keeping consumer state."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        broker = d.Broker(name="bare", id=0, endpoints=d.Endpoints(
            scheme=d.IPv4, addresses=[d.Address(host=host, port=int(port))]))
        self.ok = d.Status(code=d.OK, message="OK")
        self.broker = broker
        self.delivery: d.Message | None = None

    def QueryRoute(self, request, context):  # noqa: N802
        return s.QueryRouteResponse(status=self.ok, message_queues=[
            d.MessageQueue(topic=request.topic, id=i, permission=d.READ_WRITE, broker=self.broker,
                           accept_message_types=[d.NORMAL]) for i in range(4)])

    def SendMessage(self, request, context):  # noqa: N802
        return s.SendMessageResponse(status=self.ok, entries=[
            s.SendResultEntry(status=self.ok, message_id=m.system_properties.message_id, offset=i)
            for i, m in enumerate(request.messages)])

    def _delivery(self, request: s.ReceiveMessageRequest) -> d.Message:
        if self.delivery is None or self.delivery.topic.name != request.message_queue.topic.name:
            self.delivery = d.Message(
                topic=request.message_queue.topic, body=BODY,
                system_properties=d.SystemProperties(
                    message_id="01" + "0" * 32, tag="bench", receipt_handle="R2:0:0:1:" + "0" * 32,
                    delivery_attempt=1, invisible_duration=request.invisible_duration))
        return self.delivery

    def ReceiveMessage(self, request, context):  # noqa: N802
        delivery = self._delivery(request)
        yield s.ReceiveMessageResponse(status=self.ok)
        for _ in range(request.batch_size):
            yield s.ReceiveMessageResponse(message=delivery)

    def ReceiveMessages(self, request, context):  # noqa: N802  (BatchReceive)
        return br.ReceiveMessagesResponse(status=self.ok,
                                          messages=[self._delivery(request)] * request.batch_size)

    def AckMessage(self, request, context):  # noqa: N802
        return s.AckMessageResponse(status=self.ok, entries=[
            s.AckMessageResultEntry(status=self.ok, message_id=e.message_id,
                                    receipt_handle=e.receipt_handle) for e in request.entries])

    def AckAndReceive(self, request, context):  # noqa: N802  (BatchReceive)
        answer = self.ReceiveMessages(request.receive, context)
        if request.HasField("ack"):
            answer.ack.CopyFrom(BareServicer.AckMessage(self, request.ack, context))
        return answer


class AioBareServicer(BareServicer):
    """The bare service as the node serves it (cluster/serving/grpc_server.py): the hot calls are
    coroutines on the event loop."""

    async def SendMessage(self, request, context):  # noqa: N802
        return BareServicer.SendMessage(self, request, context)

    async def ReceiveMessage(self, request, context):  # noqa: N802
        for response in BareServicer.ReceiveMessage(self, request, context):
            yield response

    async def AckMessage(self, request, context):  # noqa: N802
        return BareServicer.AckMessage(self, request, context)

    async def ReceiveMessages(self, request, context):  # noqa: N802
        return BareServicer.ReceiveMessages(self, request, context)

    async def AckAndReceive(self, request, context):  # noqa: N802
        answer = BareServicer.ReceiveMessages(self, request.receive, context)
        if request.HasField("ack"):
            answer.ack.CopyFrom(BareServicer.AckMessage(self, request.ack, context))
        return answer


def _serve_bare(address: str, ready) -> None:
    from cluster.serving.grpc_server import AioGrpcServer  # the node's serving layer
    server = AioGrpcServer(options=[("grpc.max_receive_message_length", 64 << 20),
                                    ("grpc.max_send_message_length", 64 << 20)])
    servicer = AioBareServicer(address)
    server.add(lambda srv: s_grpc.add_MessagingServiceServicer_to_server(servicer, srv))
    server.add(lambda srv: br_grpc.add_BatchReceiveServicer_to_server(servicer, srv))
    server.add_port(address, None)
    server.start()
    ready.set()
    threading.Event().wait(3600)


class BareServer:
    """The bare service in a spawned process (so it has its own GIL, like a node)."""

    def __init__(self, port: int) -> None:
        self.address = f"127.0.0.1:{port}"
        mp = multiprocessing.get_context("spawn")
        ready = mp.Event()
        self.proc = mp.Process(target=_serve_bare, args=(self.address, ready), daemon=True)
        self.proc.start()
        if not ready.wait(30):
            self.close()
            raise RuntimeError("the bare gRPC server did not start")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.join(10)


def bare_unary(endpoint: str, n: int, warmup: int = 100) -> list[float]:
    """Milliseconds of n sequential raw stub calls (one 1 KiB message, no client library)."""
    request = s.SendMessageRequest(messages=[d.Message(
        topic=d.Resource(name="Bare"), body=BODY,
        system_properties=d.SystemProperties(message_id="01" + "0" * 32, tag="bench"))])
    with grpc.insecure_channel(endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        out = []
        for i in range(warmup + n):
            t0 = time.perf_counter()
            stub.SendMessage(request, timeout=10)
            if i >= warmup:
                out.append((time.perf_counter() - t0) * 1000)
    return out


def bare_stream(endpoint: str, batch: int, n: int, single_threaded: bool,
                warmup: int = 20) -> tuple[list[float], float]:
    """Milliseconds of n sequential raw-stub ReceiveMessage(batch) calls read to their end, and
    this process's CPU µs per streamed message. `single_threaded` sets gRPC's
    SingleThreadedUnaryStream channel option, as cluster/client's Connection does: the calling
    thread reads the stream from the call's own completion queue instead of waiting for the
    channel's spin thread to hand each response over."""
    options = [(grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)] \
        if single_threaded else []
    request = s.ReceiveMessageRequest(
        message_queue=d.MessageQueue(topic=d.Resource(name="Bare")), batch_size=batch)

    def receive() -> None:
        for _ in stub.ReceiveMessage(request, timeout=10):
            pass

    with grpc.insecure_channel(endpoint, options=options) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        for _ in range(warmup):
            receive()
        out = []
        with CpuWindow({"client": os.getpid()}) as cpu:
            for _ in range(n):
                t0 = time.perf_counter()
                receive()
                out.append((time.perf_counter() - t0) * 1000)
    return out, cpu.per_message(n * batch)["client"]
