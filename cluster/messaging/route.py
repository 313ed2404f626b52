"""Routes: which queues a topic has and where clients reach them.

Topics live in the node's replicated topic table (cluster/metadata/topic_table.py: records on
the internal topic `rmq_sys_TOPIC_TABLE`, `config/topics.json` a view of them), the same on
every replica up to its confirm offset. `TopicRegistry` adds auto-creation: with
`autoCreateTopicEnable` (default true) the MASTER creates an unknown topic on QueryRoute or
SendMessage with `defaultTopicQueueNums` (default 4) read and write queues, perm READ|WRITE.
A slave never creates topics: it asks its master (messaging_service.py), which is fresher, and
answers from its own copy of the table when the master cannot be reached.

A route lists one MessageQueue per queue id with the broker group's name, broker id 0 (the
official clients drop every queue whose broker id is not 0), a permission from the topic's perm
and queue counts, the message types NORMAL, FIFO, DELAY and TRANSACTION, and Endpoints (scheme
IPv4) with the advertised address of every node of the group (`groupAddresses`). The clients
sort those addresses and gRPC stays on the first one that answers, so every node accepts
writes (a slave forwards them to its master) and serves reads.

Several broker groups (the controller's route registry, cluster/config/cluster_route.py): a
topic's route has the queues of every group that has the topic, each naming its group and
listing that group's endpoints, so a client sends, receives, acks and heartbeats to the nodes
of the group that owns the queue (the messaging service's docstring says why). A group without
a master now has its queues without PERM_WRITE (`message_queues(writable=False)`,
cluster_route.routed_config): the official
producers send only to writable queues of broker id 0, its consumers keep reading them.
`interleaved` orders the groups' queues a0, b0, a1, b1, ...: the official Python producer
retries a failed send on the next queue of its round robin (it has no isolation of endpoints),
which is then another group's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TypeVar

from proto.apache.rocketmq.v2 import definition_pb2 as d
from store.errors import StoreError
from store.json_config import PERM_READ, PERM_WRITE, TopicConfig

from cluster.config.cluster_route import routed_config
from cluster.v2.v2_status import RECORDING_TOPIC, V2Error
from cluster.metadata.topic_table import TopicTable
from cluster.config.node_role import NotMaster
from cluster.replicated.replicated_table import AppendRefused
from cluster.replicated.table_records import TableRecordError

ACCEPTED_MESSAGE_TYPES = (d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION)
T = TypeVar("T")


@dataclass(frozen=True)
class TopicDefaults:
    """autoCreateTopicEnable and defaultTopicQueueNums as they are now (runtime-updatable)."""
    auto_create: bool = True
    queue_nums: int = 4


class TopicRegistry:
    """The topic table plus the auto-create rule, for the client API: every problem of the
    table is a V2Error (a refused append keeps its put status; a node between roles or a table
    that cannot be read is INTERNAL_SERVER_ERROR, which clients retry)."""

    def __init__(self, table: TopicTable,
                 defaults: Callable[[], TopicDefaults] = TopicDefaults) -> None:
        self.table = table
        self.defaults = defaults

    def get(self, topic: str) -> TopicConfig | None:
        return _v2(lambda: self.table.get(topic))

    def all(self) -> list[TopicConfig]:
        return _v2(self.table.all)

    def get_or_create(self, topic: str) -> TopicConfig:
        """The topic's config; creates it when unknown and auto-create is on (callers: the
        master only). TOPIC_NOT_FOUND otherwise. The name must already be validated."""
        config = self.get(topic)
        if config is not None:
            return config
        defaults = self.defaults()
        if not defaults.auto_create:
            raise V2Error(d.TOPIC_NOT_FOUND, f"topic {topic} does not exist "
                                             f"(autoCreateTopicEnable=false)")
        n = defaults.queue_nums
        return self._add(TopicConfig(topic_name=topic, read_queue_nums=n, write_queue_nums=n),
                         "auto")

    def ensure(self, topic: str, queue_nums: int) -> TopicConfig:
        """A topic the broker itself writes (e.g. %DLQ%<group>): created when missing, whatever
        autoCreateTopicEnable says (callers: the master only; never waits, so callers may hold
        another table's lock)."""
        return self._add(TopicConfig(topic_name=topic, read_queue_nums=queue_nums,
                                     write_queue_nums=queue_nums), "ensure")

    def learn(self, topic: str, queue_ids: Iterable[int]) -> TopicConfig | None:
        """A topic missing from the table although the store holds queues of it (a store from
        before the replicated table): recorded by the master with max(defaultTopicQueueNums,
        highest queue id + 1) queues; another node only answers with that config."""
        ids = list(queue_ids)
        if not ids:
            return None
        n = max(self.defaults().queue_nums, max(ids) + 1)
        config = TopicConfig(topic_name=topic, read_queue_nums=n, write_queue_nums=n)
        if not self.table.leading:
            return config
        return self._add(config, "learn")

    def _add(self, config: TopicConfig, by: str) -> TopicConfig:
        return _v2(lambda: self.table.add_missing(config, by))


def _v2(call: Callable[[], T]) -> T:
    try:
        return call()
    except AppendRefused as e:
        raise V2Error.from_put(e.result, RECORDING_TOPIC) from None
    except NotMaster as e:
        raise V2Error(d.INTERNAL_SERVER_ERROR, e.reason) from None
    except (TableRecordError, StoreError) as e:
        raise V2Error(d.INTERNAL_SERVER_ERROR, f"the topic table cannot be read: {e}") from None


def queue_permission(config: TopicConfig, queue_id: int) -> int:
    read = config.readable and queue_id < config.read_queue_nums
    write = config.writable and queue_id < config.write_queue_nums
    if read and write:
        return d.READ_WRITE
    if read:
        return d.READ
    if write:
        return d.WRITE
    return d.NONE


def endpoints(addresses: Iterable[str]) -> d.Endpoints:
    """IPv4 Endpoints of `host:port` addresses (validated by node_config), duplicates dropped."""
    out = d.Endpoints(scheme=d.IPv4)
    seen = set()
    for address in addresses:
        if address in seen:
            continue
        seen.add(address)
        host, _, port = address.rpartition(":")
        out.addresses.append(d.Address(host=host, port=int(port)))
    return out


def message_queues(topic: d.Resource, config: TopicConfig, broker_name: str,
                   broker_endpoints: d.Endpoints, writable: bool = True) -> list[d.MessageQueue]:
    """The topic's queues in one group; `writable` false (the group has no master now) takes
    PERM_WRITE away from every queue."""
    config = routed_config(config, writable)
    broker = d.Broker(name=broker_name, id=0, endpoints=broker_endpoints)
    count = max(config.read_queue_nums, config.write_queue_nums)
    return [d.MessageQueue(topic=d.Resource(name=topic.name,
                                            resource_namespace=topic.resource_namespace),
                           id=i, permission=queue_permission(config, i), broker=broker,
                           accept_message_types=ACCEPTED_MESSAGE_TYPES)
            for i in range(count)]


def interleaved(groups: Sequence[Sequence[d.MessageQueue]]) -> list[d.MessageQueue]:
    """The queues of several groups (each group's in queue order, the groups in the order
    given), taken by turns: the first of each group, then the second of each, ..."""
    out: list[d.MessageQueue] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def config_from_route(topic: str, queues: Iterable[d.MessageQueue],
                      broker_name: str) -> TopicConfig | None:
    """The topic config a route describes for group `broker_name` (a slave learning it from its
    master); None for a route without queues of that group."""
    count = read = write = 0
    for q in queues:
        if q.broker.name != broker_name:
            continue
        count = max(count, q.id + 1)
        if q.permission in (d.READ, d.READ_WRITE):
            read = max(read, q.id + 1)
        if q.permission in (d.WRITE, d.READ_WRITE):
            write = max(write, q.id + 1)
    if not count:
        return None
    perm = (PERM_READ if read else 0) | (PERM_WRITE if write else 0)
    return TopicConfig(topic_name=topic, read_queue_nums=read or count,
                       write_queue_nums=write or count, perm=perm)
