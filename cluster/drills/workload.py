"""The drill's load: producers and consumers speaking the RocketMQ 5 protocol (cluster/client)
to the nodes, every send and every receive recorded into a History.

Besides the live consumer groups, "late" groups start reading from the first offset only
after the faults: they check what the log kept, not what was consumed in time.

Besides these, `official_producers` producers and `official_consumers` SimpleConsumers of the
official RocketMQ 5 Python client (one process, official_client.py) send to the same topic and
consume it in a group of their own (`official_group`), given every node's address as an
operator's application would be: the drill then measures what that client sees.

Producers send one message per request (so each send has one outcome) at a steady rate; FIFO
producers send their message groups in sequence, the next message only after the previous
one's answer, as an ordered producer must. Consumers are SimpleConsumers: receive, record, ack,
record the ack. Like a client given several endpoints, each worker talks to one node and moves
to the next one when a call fails, so it finds the new master (or a slave that forwards to it)
after a failover.

Several broker groups (`groups`: broker name -> its nodes' addresses, more than one): the
producers send through the route (cluster/client/routed_producer.py: every group's queues
round-robin, a refused send moved to another group's queue) and record which group stored
each message and which refused it first; each consumer group reads every broker group with
`consumers` workers per broker group on that group's nodes (no node serves another group's
queues).

Outcomes (the checker's three kinds):
  OK       the send answered OK: acknowledged as stored with the promised durability
  FAILED   the server answered that nothing was stored (a status without entries)
  UNKNOWN  no answer (deadline, connection lost), PROXY_TIMEOUT from a forwarding slave, or
           stored-but-not-durable (NotDurableError): it may or may not survive
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple, Sequence

from proto.apache.rocketmq.v2 import definition_pb2 as d

from cluster.client.client_errors import ClientError, NotDurableError, TransportError
from cluster.client.connection import ClientConfig, Connection
from cluster.security.tls import ClientTls
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.client.routed_producer import RoutedProducer, RoutedSendError
from cluster.client.simple_consumer import SimpleConsumer
from cluster.drills.history import Ack, History, Receive, Send, SendOutcome, body_for, key_of

# Answers that do not say whether the message was stored.
UNKNOWN_CODES = frozenset({d.PROXY_TIMEOUT, d.REQUEST_TIMEOUT, d.CODE_UNSPECIFIED})


@dataclass(frozen=True)
class WorkloadConfig:
    """The shape of a drill's load: topics and consumer groups (plain and FIFO), how many
    producers (and FIFO message groups) and consumers, the send rate, body size, send
    timeout and invisible duration. Immutable; `renamed` gives the same load on fresh names."""

    topic: str = "DrillTopic"
    fifo_topic: str = "DrillFifoTopic"
    group: str = "drill-group"
    fifo_group: str = "drill-fifo-group"
    producers: int = 3
    official_producers: int = 0      # producers of the official client (another process)
    official_consumers: int = 0      # its SimpleConsumers, in official_group
    fifo_producers: int = 1
    message_groups: int = 4          # per FIFO producer
    consumers: int = 2               # per consumer group
    rate: float = 60.0               # sends per second per producer
    body_size: int = 256
    send_timeout: float = 3.0
    invisible_s: float = 10.0        # not acked in time: back after this (server min 10 s)
    # Producers start on different nodes (a slave forwards to the master); False: all on the
    # first address, as the official clients' pick_first channel does (the gray drills: a
    # producer on the slow node would be slowed by its forwarding, not by replication).
    spread_producers: bool = True

    def __post_init__(self) -> None:
        if ((self.producers < 1 and self.official_producers < 1) or self.producers < 0
                or self.consumers < 1 or self.fifo_producers < 0
                or self.official_producers < 0 or self.official_consumers < 0):
            raise ValueError("need at least one producer and one consumer per group")
        if self.rate <= 0 or self.send_timeout <= 0 or self.invisible_s <= 0:
            raise ValueError("rate, send_timeout and invisible_s must be > 0")

    def renamed(self, suffix: str) -> "WorkloadConfig":
        """The same load on topics and groups named with `suffix`."""
        return dataclasses.replace(self, topic=self.topic + suffix,
                                   fifo_topic=self.fifo_topic + suffix,
                                   group=self.group + suffix, fifo_group=self.fifo_group + suffix)

    @property
    def official_group(self) -> str:
        return self.group + "-official"

    @property
    def official(self) -> bool:
        return bool(self.official_producers or self.official_consumers)

    def groups(self) -> dict[str, str]:
        """consumer group -> its topic, for the groups consuming while the drill runs."""
        out = {self.group: self.topic}
        if self.fifo_producers:
            out[self.fifo_group] = self.fifo_topic
        return out

    def late_groups(self) -> dict[str, str]:
        """Groups that start reading only after the faults, from the first offset: they see
        what the log kept, so an acknowledged message that a failover erased is missing for
        them even when the live groups consumed it before it vanished."""
        return {f"{group}-late": topic for group, topic in self.groups().items()}

    def all_groups(self) -> dict[str, str]:
        """Every group that must receive every acknowledged message of its topic."""
        official = {self.official_group: self.topic} if self.official_consumers else {}
        return {**self.groups(), **self.late_groups(), **official}


def send_outcome(error: Exception | None) -> SendOutcome:
    if error is None:
        return SendOutcome.OK
    if isinstance(error, (NotDurableError, TransportError)):
        return SendOutcome.UNKNOWN
    if isinstance(error, ClientError) and error.code in UNKNOWN_CODES:
        return SendOutcome.UNKNOWN
    return SendOutcome.FAILED


class _Endpoints:
    """A worker's connections, one per node, and the node it uses now."""

    def __init__(self, addresses: Sequence[str], start: int, timeout: float,
                 tls: ClientTls | None = None, credentials: tuple[str, str] = ("", "")) -> None:
        access_key, secret_key = credentials
        self.connections = [Connection(ClientConfig(endpoints=a, request_timeout=timeout,
                                                    tls=tls, access_key=access_key,
                                                    secret_key=secret_key))
                            for a in addresses]
        self.index = start % len(addresses)

    @property
    def current(self) -> Connection:
        return self.connections[self.index]

    def next(self) -> None:
        self.index = (self.index + 1) % len(self.connections)

    def close(self) -> None:
        for c in self.connections:
            c.close()


class _Sent(NamedTuple):
    """One send as a producer records it: its id, the group that stored it ("" when not
    known), the groups that refused it before, the error (None: stored)."""
    message_id: str = ""
    group: str = ""
    refused_by: tuple[str, ...] = ()
    error: ClientError | None = None


class _NodeSender:
    """Sends to one node at a time, moving to the next after a send that was not OK (one
    broker group)."""

    def __init__(self, ends: _Endpoints) -> None:
        self.ends = ends

    def send(self, msg: Message, timeout: float) -> _Sent:
        try:
            return _Sent(message_id=Producer(self.ends.current).send(msg, timeout).message_id)
        except ClientError as e:
            if send_outcome(e) is not SendOutcome.OK:
                self.ends.next()
            return _Sent(error=e)

    def close(self) -> None:
        self.ends.close()


class _RoutedSender:
    """Sends through the route's groups (RoutedProducer)."""

    def __init__(self, producer: RoutedProducer) -> None:
        self.producer = producer

    def send(self, msg: Message, timeout: float) -> _Sent:
        try:
            r = self.producer.send(msg, timeout)
            return _Sent(r.message_id, r.broker_name, r.refused_by)
        except RoutedSendError as e:
            return _Sent(group=e.broker_name, refused_by=e.refused_by, error=e.cause)
        except ClientError as e:  # the route query failed
            return _Sent(error=e)

    def close(self) -> None:
        self.producer.close()


class Workload:
    """Threads producing and consuming until stop_producers() / stop(). Owns its threads and
    connections; everything it sees goes into `history`."""

    def __init__(self, addresses: Sequence[str], history: History,
                 config: WorkloadConfig = WorkloadConfig(), tls: ClientTls | None = None,
                 credentials: tuple[str, str] = ("", ""),
                 groups: Mapping[str, Sequence[str]] | None = None) -> None:
        self.addresses = list(addresses)
        # broker name -> its nodes' addresses; None or one group: the single-group workload
        self.groups = {g: list(a) for g, a in groups.items()} if groups and len(groups) > 1 \
            else None
        self.tls = tls
        self.credentials = credentials  # (access key, secret key) of an ACL user; "": unsigned
        self.history = history
        self.config = config
        self._producing = threading.Event()
        self._consuming = threading.Event()
        self._threads: list[threading.Thread] = []
        self._errors_lock = threading.Lock()
        self.consumer_errors: dict[str, int] = {}  # error text -> count, for the drill's notes
        self._official: subprocess.Popen | None = None

    def start(self) -> None:
        self._producing.set()
        self._consuming.set()
        c = self.config
        for i in range(c.producers):
            self._spawn(f"producer-{i}", lambda i=i: self._produce(i, None))
        for i in range(c.fifo_producers):
            self._spawn(f"fifo-producer-{i}", lambda i=i: self._produce(i, c.message_groups))
        if c.official:
            self._start_official()
        self._start_consumers(c.groups())

    def start_late_readers(self) -> None:
        self._start_consumers(self.config.late_groups())

    def _start_consumers(self, groups: dict[str, str]) -> None:
        brokers = self.groups or {"": self.addresses}
        for group, topic in groups.items():
            for broker, addresses in brokers.items():
                for i in range(self.config.consumers):
                    self._spawn(f"{group}-{broker}{i}",
                                lambda g=group, t=topic, i=i, b=broker, a=addresses:
                                self._consume(g, t, i, b, a))

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=f"drill-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def stop_producers(self) -> None:
        self._producing.clear()
        self._tell_official("stop producers")

    def stop(self) -> None:
        self._producing.clear()
        self._consuming.clear()
        self._stop_official()
        for t in self._threads:
            t.join(self.config.send_timeout + 30)

    # -- the official client -------------------------------------------------------------------
    def _start_official(self) -> None:
        """Starts official_client.py and waits until its clients started (route and settings
        fetched), so the drill's warm-up covers both clients."""
        c = self.config
        if self.tls is not None:
            raise ValueError("the official client's producers need a plaintext cluster (it "
                             "trusts only the system's CAs)")
        spec = {"endpoints": ";".join(self.addresses), "topic": c.topic,
                "producers": c.official_producers, "rate": c.rate, "body_size": c.body_size,
                "request_timeout": c.send_timeout, "group": c.official_group,
                "consumers": c.official_consumers, "invisible_s": c.invisible_s,
                "ak": self.credentials[0], "sk": self.credentials[1]}
        proc = subprocess.Popen([sys.executable, "-m", "cluster.drills.official_client"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._official = proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(spec) + "\n")
        proc.stdin.flush()
        ready = proc.stdout.readline()
        if not ready.strip().startswith('{"ready"'):
            self._stop_official()
            raise RuntimeError(f"the official client did not start "
                               f"(exit {proc.poll()}, said {ready.strip()!r}); is "
                               f"rocketmq-python-client installed?")
        self._spawn("official-client", lambda: self._read_official(proc))

    def _read_official(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        topic, group = self.config.topic, self.config.official_group
        for line in proc.stdout:
            r = json.loads(line)
            if r["kind"] == "send":
                self.history.record_send(Send(
                    key=r["key"], topic=topic, message_group=None, seq=r["seq"],
                    started=r["started"], finished=r["finished"],
                    outcome=SendOutcome.OK if r["ok"] else SendOutcome.UNKNOWN,
                    detail=r["detail"], message_id=r["message_id"], client="official",
                    group=r.get("broker", "")))
            elif r["kind"] == "receive":
                self.history.record_receive(Receive(
                    key=r["key"], topic=topic, group=group, queue_id=-1, queue_offset=-1,
                    message_id=r["message_id"], delivery_attempt=r["attempt"], at=r["at"],
                    broker=self._broker_of(r.get("endpoints", ""))))
            elif r["kind"] == "ack":
                self.history.record_ack(Ack(key=r["key"], group=group,
                                            message_id=r["message_id"], ok=r["ok"], at=r["at"],
                                            detail=r["detail"]))

    def _broker_of(self, endpoints: str) -> str:
        """The broker group whose nodes `endpoints` ("h:p,h:p" or "h:p;h:p") name ("" with
        one group, or none matching)."""
        named = set(endpoints.replace(";", ",").split(","))
        return next((g for g, addresses in (self.groups or {}).items()
                     if named & set(addresses)), "")

    def _tell_official(self, command: str, last: bool = False) -> None:
        """Write a command line to the official client's process (`last`: then close its
        input); a process already gone is fine."""
        proc = self._official
        try:
            if proc is not None and proc.stdin is not None:
                proc.stdin.write(command + "\n")
                if last:
                    proc.stdin.close()
                else:
                    proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it is gone already

    def _stop_official(self) -> None:
        self._tell_official("stop", last=True)
        proc, self._official = self._official, None
        if proc is None:
            return
        try:
            proc.wait(self.config.send_timeout * 4 + 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # -- producing -----------------------------------------------------------------------------
    def _produce(self, index: int, message_groups: int | None) -> None:
        """One producer at `config.rate` sends per second (a FIFO one over `message_groups`
        message groups), every send recorded; where it sends is its sender's business."""
        c = self.config
        sender = self._sender(index)
        fifo = message_groups is not None
        seqs = [0] * (message_groups or 1)
        interval = 1.0 / c.rate
        next_at = time.monotonic()
        n = 0
        try:
            while self._producing.is_set():
                slot = n % len(seqs)
                n += 1
                group = f"mg{index}-{slot}" if fifo else None
                key = f"f{index}-{slot}-{seqs[slot]}" if fifo else f"p{index}-{seqs[slot]}"
                msg = Message(topic=c.fifo_topic if fifo else c.topic,
                              body=body_for(key, c.body_size), keys=(key,), message_group=group)
                started = time.monotonic()
                sent = sender.send(msg, c.send_timeout)
                self.history.record_send(Send(
                    key=key, topic=msg.topic, message_group=group, seq=seqs[slot],
                    started=started, finished=time.monotonic(),
                    outcome=send_outcome(sent.error),
                    detail="" if sent.error is None else str(sent.error)[:200],
                    message_id=sent.message_id or (msg.message_id or ""), group=sent.group,
                    refused_by=",".join(sent.refused_by)))
                seqs[slot] += 1
                next_at = max(next_at + interval, time.monotonic() - 1.0)
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        finally:
            sender.close()

    def _sender(self, index: int) -> "_NodeSender | _RoutedSender":
        c = self.config
        if self.groups:  # several broker groups: through the route, as the official clients
            access_key, secret_key = self.credentials
            first = next(iter(self.groups.values()))
            return _RoutedSender(RoutedProducer(ClientConfig(
                endpoints=";".join(first), request_timeout=c.send_timeout, tls=self.tls,
                access_key=access_key, secret_key=secret_key)))
        return _NodeSender(_Endpoints(self.addresses, index if c.spread_producers else 0,
                                      c.send_timeout, self.tls, self.credentials))

    def _count_error(self, error: ClientError) -> None:
        text = str(error)[:120]
        with self._errors_lock:
            self.consumer_errors[text] = self.consumer_errors.get(text, 0) + 1

    # -- consuming -----------------------------------------------------------------------------
    def _consume(self, group: str, topic: str, index: int, broker: str,
                 addresses: Sequence[str]) -> None:
        """One consumer of `group` on `addresses` (the nodes of broker group `broker`, "" for
        the single-group workload)."""
        c = self.config
        ends = _Endpoints(addresses, index, c.send_timeout, self.tls, self.credentials)
        consumers = [SimpleConsumer(conn, group, {topic: "*"}, await_duration=1.0,
                                    invisible_duration=c.invisible_s)
                     for conn in ends.connections]
        try:
            while self._consuming.is_set():
                consumer = consumers[ends.index]
                try:
                    got = consumer.receive(16)
                except ClientError as e:
                    self._count_error(e)
                    ends.next()
                    time.sleep(0.1)
                    continue
                now = time.monotonic()
                for m in got:
                    self.history.record_receive(Receive(
                        key=key_of(m.body), topic=m.topic, group=group, queue_id=m.queue_id,
                        queue_offset=m.queue_offset, message_id=m.message_id or "",
                        delivery_attempt=m.delivery_attempt, at=now, broker=broker))
                if not got:
                    continue
                try:
                    errors = consumer.ack_many(got)
                except ClientError as e:
                    errors = [e] * len(got)
                    self._count_error(e)
                    ends.next()
                now = time.monotonic()
                for m, err in zip(got, errors):
                    key = key_of(m.body)
                    if key is not None:
                        self.history.record_ack(Ack(key=key, group=group,
                                                    message_id=m.message_id or "",
                                                    ok=err is None, at=now,
                                                    detail="" if err is None else str(err)[:200]))
        finally:
            ends.close()
