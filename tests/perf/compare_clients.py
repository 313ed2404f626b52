"""Client side of tests/perf/compare.py: the same workloads against our RocketMQ 5 gRPC API (our
client library, as bench_messaging uses it), NATS JetStream (nats-py) and Redis streams (redis-py),
each peer through its own official client.

Every function runs inside one worker process of compare.py's pool (one process per client, so
the clients do not share a GIL) and takes a `spec`: {"kind": "ours"|"nats"|"redis",
"address": "host:port"}. Times are time.time() so the main process can join the windows of
several workers on one clock (same machine).
"""
from __future__ import annotations

import asyncio
import os
import struct
import time

BODY = os.urandom(1024)
STAMP = struct.Struct("<4sdq")  # magic, send time, sequence number: head of an e2e body
MAGIC = b"E2E!"


def _body(seq: int = 0, stamp: bool = False) -> bytes:
    if not stamp:
        return BODY
    return STAMP.pack(MAGIC, time.time(), seq) + BODY[STAMP.size:]


def _wait_until(t: float) -> None:
    delay = t - time.time()
    if delay > 0:
        time.sleep(delay)


# ---- ours ---------------------------------------------------------------------------------

def _ours_conn(spec: dict):
    from cluster.client import ClientConfig, Connection
    return Connection(ClientConfig(spec["address"], request_timeout=30))


def _ours_msgs(topic: str, n: int, start: int = 0, stamp: bool = False) -> list:
    from cluster.client import Message
    return [Message(topic, _body(start + i, stamp), tag="bench", keys=f"k{start + i}")
            for i in range(n)]


# ---- produce --------------------------------------------------------------------------------

def produce(spec: dict, topic: str, count: int, window: int, warmup: int,
            start_at: float) -> dict:
    """`warmup` messages (not counted), then wait for `start_at`, then `count` messages in
    batches of `window`, one batch in flight: the batch is sent and all its acks awaited."""
    kind = spec["kind"]
    if kind == "nats":
        return asyncio.run(_nats_produce(spec, topic, count, window, warmup, start_at))
    if kind == "ours":
        from cluster.client import Producer
        from cluster.client.producer import NO_RETRY
        with _ours_conn(spec) as conn:
            producer = Producer(conn, retry=NO_RETRY)

            def send(n: int) -> None:
                producer.send_batch(_ours_msgs(topic, n))
            return _batches(send, count, window, warmup, start_at)
    client = _redis(spec)

    def send_redis(n: int) -> None:
        pipe = client.pipeline(transaction=False)
        for _ in range(n):
            pipe.xadd(topic, {"b": BODY})
        pipe.execute()
    try:
        return _batches(send_redis, count, window, warmup, start_at)
    finally:
        client.close()


def _batches(send, count: int, window: int, warmup: int, start_at: float) -> dict:
    for done in range(0, warmup, window):
        send(min(window, warmup - done))
    _wait_until(start_at)
    t0 = time.time()
    for done in range(0, count, window):
        send(min(window, count - done))
    return {"start": t0, "end": time.time(), "count": count}


async def _nats_connect(spec: dict):
    import nats
    nc = await nats.connect(f"nats://{spec['address']}", max_reconnect_attempts=0)
    return nc, nc.jetstream(timeout=spec.get("js_timeout", 30))


async def _nats_produce(spec: dict, topic: str, count: int, window: int, warmup: int,
                        start_at: float) -> dict:
    nc, js = await _nats_connect(spec)
    try:
        async def send(n: int) -> None:
            await asyncio.gather(*(js.publish(topic, BODY) for _ in range(n)))
        for done in range(0, warmup, window):
            await send(min(window, warmup - done))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        t0 = time.time()
        for done in range(0, count, window):
            await send(min(window, count - done))
        return {"start": t0, "end": time.time(), "count": count}
    finally:
        await nc.close()


# ---- sequential latency -----------------------------------------------------------------------

def sequential(spec: dict, topic: str, count: int, warmup: int) -> list[float]:
    """Milliseconds of `count` sequential single-message sends, each awaited (after `warmup`)."""
    kind = spec["kind"]
    if kind == "nats":
        return asyncio.run(_nats_sequential(spec, topic, count, warmup))
    out: list[float] = []
    if kind == "ours":
        from cluster.client import Message, Producer
        from cluster.client.producer import NO_RETRY
        with _ours_conn(spec) as conn:
            producer = Producer(conn, retry=NO_RETRY)
            for i in range(warmup + count):
                msg = Message(topic, BODY, tag="bench", keys=f"l{i}")
                t0 = time.perf_counter()
                producer.send(msg)
                if i >= warmup:
                    out.append((time.perf_counter() - t0) * 1000)
        return out
    client = _redis(spec)
    try:
        for i in range(warmup + count):
            t0 = time.perf_counter()
            client.xadd(topic, {"b": BODY})
            if i >= warmup:
                out.append((time.perf_counter() - t0) * 1000)
    finally:
        client.close()
    return out


async def _nats_sequential(spec: dict, topic: str, count: int, warmup: int) -> list[float]:
    nc, js = await _nats_connect(spec)
    out: list[float] = []
    try:
        for i in range(warmup + count):
            t0 = time.perf_counter()
            await js.publish(topic, BODY)
            if i >= warmup:
                out.append((time.perf_counter() - t0) * 1000)
    finally:
        await nc.close()
    return out


# ---- consume -----------------------------------------------------------------------------------

def consume(spec: dict, topic: str, group: str, count: int, batch: int,
            limit_s: float, stamped: bool = False, ahead: int = 0) -> dict:
    """Receive + ack until `count` messages were acked (or `limit_s` passed): batches of up to
    `batch`, every batch acked before (ours: with) the next receive. With `stamped`, the end-to-end latency
    (ms) of every stamped message is returned too, by sequence number. `ahead` (ours only):
    that many receives in flight (ReceiveAhead), each batch acked by a later one."""
    kind = spec["kind"]
    if kind == "nats":
        return asyncio.run(_nats_consume(spec, topic, group, count, batch, limit_s, stamped))
    if ahead:
        if kind != "ours" or stamped:
            raise ValueError("receives ahead: ours only, and not for stamped messages")
        return _ours_consume_ahead(spec, topic, group, count, batch, limit_s, ahead)
    lat: dict[int, float] = {}
    got, t0, deadline = 0, time.time(), time.monotonic() + limit_s
    if kind == "ours":
        from cluster.client import SimpleConsumer
        with _ours_conn(spec) as conn:
            consumer = SimpleConsumer(conn, group, {topic: "*"}, await_duration=1)
            # Each batch is acked by the next receive (AckAndReceive: one round trip per
            # batch), the last one at once. A stamped run stops at `count` stamped messages:
            # an unstamped one (the topic's warm message) must not end it one short.
            received, unacked = 0, []
            while (len(lat) if stamped else got) < count and time.monotonic() < deadline:
                results, msgs = consumer.ack_and_receive(unacked, batch, 30)
                now = time.time()
                got += len(unacked) - sum(e is not None for e in results)
                received += len(msgs)
                if stamped:
                    _stamps(lat, now, (m.body for m in msgs))
                unacked = msgs
                if (len(lat) if stamped else received) >= count:
                    got += len(msgs) - sum(e is not None for e in consumer.ack_many(msgs))
                    unacked = []
        return {"start": t0, "end": time.time(), "count": got, "latency": lat}
    client = _redis(spec)
    try:
        while got < count and time.monotonic() < deadline:
            resp = client.xreadgroup(group, "c", {topic: ">"}, count=batch, block=1000)
            if not resp:
                continue
            entries = resp[0][1]
            now = time.time()
            if stamped:
                _stamps(lat, now, (fields[b"b"] for _, fields in entries))
            got += client.xack(topic, group, *[eid for eid, _ in entries])
    finally:
        client.close()
    return {"start": t0, "end": time.time(), "count": got, "latency": lat}


def _stamps(lat: dict[int, float], now: float, bodies) -> None:
    for body in bodies:
        magic, sent, seq = STAMP.unpack_from(body)
        if magic == MAGIC:  # not the unstamped message that created the topic
            lat[seq] = (now - sent) * 1000


def _ours_consume_ahead(spec: dict, topic: str, group: str, count: int, batch: int,
                        limit_s: float, ahead: int) -> dict:
    """`consume` with `ahead` receives in flight: each take() sends a call that acks the
    batch the previous take handed out. The clock stops at the answer that brought the last
    ack's result; close() (releasing the receives still in flight) is not timed. The backlog
    is dispatched before the clock starts, so the receives do not long-poll (await 0): past
    its end they answer empty at once, carrying the last acks."""
    from cluster.client import ReceiveAhead, SimpleConsumer
    t0, deadline = time.time(), time.monotonic() + limit_s
    with _ours_conn(spec) as conn:
        consumer = SimpleConsumer(conn, group, {topic: "*"}, await_duration=0)
        calls = ReceiveAhead(consumer, batch, ahead)
        done: list = []
        while calls.acked < count and time.monotonic() < deadline:
            done = calls.take(done)
        end = time.time()
        calls.close(done)
        return {"start": t0, "end": end, "count": calls.acked, "latency": {}}


async def _nats_consume(spec: dict, topic: str, group: str, count: int, batch: int,
                        limit_s: float, stamped: bool) -> dict:
    import nats.errors
    nc, js = await _nats_connect(spec)
    lat: dict[int, float] = {}
    got, t0, deadline = 0, time.time(), time.monotonic() + limit_s
    try:
        sub = await js.pull_subscribe(topic, durable=group)
        while got < count and time.monotonic() < deadline:
            try:
                msgs = await sub.fetch(batch, timeout=1)
            except nats.errors.TimeoutError:
                continue
            now = time.time()
            if stamped:
                _stamps(lat, now, (m.data for m in msgs))
            # JetStream's ack is a plain publish that the server does not answer; its
            # client's ack() awaits only the write, like every peer's ack call here.
            for m in msgs:
                await m.ack()
            got += len(msgs)
        await nc.flush()
    finally:
        await nc.close()
    return {"start": t0, "end": time.time(), "count": got, "latency": lat}


# ---- fixed-rate producer for end-to-end latency ---------------------------------------------

def paced_produce(spec: dict, topic: str, count: int, rate: float, start_at: float) -> dict:
    """`count` stamped messages, one at a time, the i-th sent at start_at + i/rate (or as soon as
    the previous one was acked, when behind)."""
    kind = spec["kind"]
    if kind == "nats":
        return asyncio.run(_nats_paced(spec, topic, count, rate, start_at))
    if kind == "ours":
        from cluster.client import Producer
        from cluster.client.producer import NO_RETRY
        with _ours_conn(spec) as conn:
            producer = Producer(conn, retry=NO_RETRY)
            for i in range(count):
                _wait_until(start_at + i / rate)
                producer.send(_ours_msgs(topic, 1, i, stamp=True)[0])
        return {"count": count}
    client = _redis(spec)
    try:
        for i in range(count):
            _wait_until(start_at + i / rate)
            client.xadd(topic, {"b": _body(i, True)})
    finally:
        client.close()
    return {"count": count}


async def _nats_paced(spec: dict, topic: str, count: int, rate: float, start_at: float) -> dict:
    nc, js = await _nats_connect(spec)
    try:
        for i in range(count):
            await asyncio.sleep(max(0.0, start_at + i / rate - time.time()))
            await js.publish(topic, _body(i, True))
    finally:
        await nc.close()
    return {"count": count}


# ---- setup helpers (untimed) --------------------------------------------------------------------

def _redis(spec: dict):
    import redis
    host, port = spec["address"].rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), socket_timeout=60)


def prepare(spec: dict, topic: str, group: str | None = None) -> None:
    """Create the stream (and consumer group) of `topic` before anything is timed."""
    kind = spec["kind"]
    if kind == "nats":
        asyncio.run(_nats_prepare(spec, topic, spec.get("replicas", 1)))
    elif kind == "redis" and group:
        client = _redis(spec)
        try:
            client.xgroup_create(topic, group, id="0", mkstream=True)
        finally:
            client.close()
    elif kind == "ours":
        from cluster.client import Message, Producer
        with _ours_conn(spec) as conn:  # route + auto-create, then a consumer group exists
            Producer(conn).send(Message(topic, BODY, tag="warm"))
            if group:
                # the group takes the warm message now (a long poll: it may not be dispatched
                # yet), so the timed consumer counts only the messages of its workload
                from cluster.client import SimpleConsumer
                c = SimpleConsumer(conn, group, {topic: "*"}, await_duration=5)
                deadline = time.monotonic() + 30
                while not c.ack_many(c.receive(32, 30)) and time.monotonic() < deadline:
                    pass


async def _nats_prepare(spec: dict, topic: str, replicas: int) -> None:
    from nats.js.api import StorageType, StreamConfig
    nc, js = await _nats_connect(spec)
    try:
        await js.add_stream(StreamConfig(name=topic, subjects=[topic], storage=StorageType.FILE,
                                         num_replicas=replicas))
    finally:
        await nc.close()
