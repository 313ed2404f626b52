"""Topic management of the Admin API: list, create, update, delete.

The table is the node's replicated topic table (cluster/metadata/topic_table.py, the one
QueryRoute and SendMessage use), so a topic created here is routed at once. Every node lists
its own copy (a slave: its master's table up to its confirm offset); changes happen on the
master only, and answer once their record holds under the flush and replication policy (a
change that is stored on the master but not yet durable answers FAILED_PRECONDITION saying so).
Names the broker manages itself (system topics, rmq_sys_*/RMQ_SYS_*, %RETRY%<group>,
%DLQ%<group>) are refused with PERMISSION_DENIED: changing their queue counts or deleting them
would break the schedule service, the consumer state or the retry/DLQ path. Deleting a topic
removes its table entry only; its messages stay until retention deletes the files that hold
them.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Callable, TypeVar

import grpc

from proto import admin_pb2 as pb
from store.errors import MessageIllegal, StoreError
from store.json_config import MAX_QUEUE_NUMS, PERM_READ, PERM_WRITE, TopicConfig
from store.put_result import PutResult, PutStatus
from store.validation import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, check_topic, is_system_topic

from cluster.admin.admin_error import AdminError, invalid, not_master_error
from cluster.metadata.topic_table import TopicExists, TopicMissing, TopicTable
from cluster.config.node_role import NotMaster
from cluster.replicated.replicated_table import AppendRefused
from cluster.replicated.table_records import TableRecordError

if TYPE_CHECKING:
    from cluster.admin.admin_node import AdminNode

log = logging.getLogger(__name__)
ALLOWED_PERMS = {PERM_WRITE: "-W", PERM_READ: "R-", PERM_READ | PERM_WRITE: "RW"}
DELETE_NOTE = ("removed from the topic table only: its messages stay in the commitlog and consume "
               "queues until retention deletes them (fileReservedTime); with "
               "autoCreateTopicEnable=true the next send creates the topic again")
T = TypeVar("T")


def topic_kind(name: str) -> str:
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "RETRY"
    if name.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "DLQ"
    return "SYSTEM" if is_system_topic(name) else "NORMAL"


def perm_name(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")


def _table(node: "AdminNode") -> TopicTable:
    return node.topics.table


def _call(what: str, call: Callable[[], T]) -> T:
    """A call of the topic table, its problems as AdminErrors."""
    try:
        return call()
    except AppendRefused as e:
        raise AdminError(grpc.StatusCode.FAILED_PRECONDITION,
                         f"{what}: the store refused the change ({e}); nothing changed") from None
    except NotMaster as e:  # the role changed under the call
        raise not_master_error(what, e) from None
    except (TableRecordError, StoreError) as e:
        raise AdminError(grpc.StatusCode.INTERNAL, f"{what}: {e}") from None


def learn_sent_topics(node: "AdminNode", msgs) -> None:
    """Admin SendMessages writes through the store, not through SendMessage's auto-creation: a
    topic the table does not have is recorded first, like a topic learnt from its queues
    (max(defaultTopicQueueNums, highest queue id sent + 1) queues, appended without a wait
    before the messages), so no message sent this way sits in a topic no route lists. System
    topics are not in the table. NotMaster (a slave) becomes FAILED_PRECONDITION."""
    queues: dict[str, set[int]] = {}
    for m in msgs:
        if not is_system_topic(m.topic):
            queues.setdefault(m.topic, set()).add(m.queue_id)
    for topic in list(queues):
        try:
            check_topic(topic)
        except MessageIllegal:  # the store refuses the put with MESSAGE_ILLEGAL, as before
            del queues[topic]
    table = _table(node)
    missing = []
    for topic, ids in sorted(queues.items()):  # every check before the first record
        what = f"send to {topic}"
        known = _call(what, lambda: table.get(topic))
        limit = MAX_QUEUE_NUMS if known is None else max(known.read_queue_nums,
                                                         known.write_queue_nums)
        if max(ids) >= limit:
            raise invalid(f"queue_id {max(ids)} of topic {topic} is not in [0, {limit}): no "
                          f"route would list it")
        if known is None:
            n = min(MAX_QUEUE_NUMS, max(node.topics.defaults().queue_nums, max(ids) + 1))
            missing.append(TopicConfig(topic_name=topic, read_queue_nums=n, write_queue_nums=n))
    for config in missing:
        _call(f"send to {config.topic_name}", lambda: table.add_missing(config, "learn"))


def _durable(what: str, result: PutResult) -> None:
    if result.status is not PutStatus.PUT_OK:
        raise AdminError(grpc.StatusCode.FAILED_PRECONDITION,
                         f"{what}: stored on the master but not durable: {result.status.value}"
                         f"{': ' + result.reason if result.reason else ''}")


def check_writable_name(name: str) -> None:
    """A name an operator may create, change or delete."""
    if not name:
        raise invalid("the topic name is empty")
    try:
        check_topic(name, allow_system=True)
    except MessageIllegal as e:
        raise invalid(f"topic name {name!r}: {e}") from None
    kind = topic_kind(name)
    if kind != "NORMAL":
        raise AdminError(grpc.StatusCode.PERMISSION_DENIED,
                         f"{name} is a reserved {kind.lower()} topic managed by the broker: it "
                         f"cannot be created, changed or deleted through the admin API")


def _check_counts(what: str, value: int) -> int:
    if not 1 <= value <= MAX_QUEUE_NUMS:
        raise invalid(f"{what} {value} is out of range 1..{MAX_QUEUE_NUMS}")
    return value


def _check_perm(perm: int) -> int:
    if perm not in ALLOWED_PERMS:
        raise invalid(f"perm {perm} is not one of 2 (write), 4 (read), 6 (read and write)")
    return perm


def _changes(req: pb.TopicRequest) -> dict:
    """The TopicConfig fields a request sets, validated."""
    if req.HasField("queue_nums") and (req.HasField("read_queue_nums")
                                       or req.HasField("write_queue_nums")):
        raise invalid("give queue_nums, or read_queue_nums/write_queue_nums, not both")
    out: dict = {}
    if req.HasField("queue_nums"):
        n = _check_counts("queue_nums", req.queue_nums)
        out["read_queue_nums"] = out["write_queue_nums"] = n
    if req.HasField("read_queue_nums"):
        out["read_queue_nums"] = _check_counts("read_queue_nums", req.read_queue_nums)
    if req.HasField("write_queue_nums"):
        out["write_queue_nums"] = _check_counts("write_queue_nums", req.write_queue_nums)
    if req.HasField("perm"):
        out["perm"] = _check_perm(req.perm)
    if req.HasField("order"):
        out["order"] = req.order
    return out


def to_info(config: TopicConfig) -> pb.TopicInfo:
    return pb.TopicInfo(name=config.topic_name, read_queue_nums=config.read_queue_nums,
                        write_queue_nums=config.write_queue_nums, perm=config.perm,
                        perm_name=perm_name(config.perm), order=config.order,
                        kind=topic_kind(config.topic_name), configured=True)


def list_topics(node: "AdminNode", req: pb.ListTopicsRequest) -> pb.ListTopicsResponse:
    state = _call("list topics", _table(node).state)
    store = node.store
    configured = {c.topic_name: c for c in state.all()}
    queues: dict[str, list[int]] = {}
    for cq in store.consume_queues():
        queues.setdefault(cq.topic, []).append(cq.queue_id)
    names = sorted(set(configured) | set(queues))
    if req.topic:
        if req.topic not in configured and req.topic not in queues:
            raise AdminError(grpc.StatusCode.NOT_FOUND, f"topic {req.topic} does not exist")
        names = [req.topic]
    timestamp, counter = state.data_version
    out = pb.ListTopicsResponse(data_version_counter=counter, data_version_timestamp=timestamp)
    for name in names:
        config = configured.get(name)
        info = to_info(config) if config else pb.TopicInfo(name=name, kind=topic_kind(name),
                                                           perm_name="--")
        if info.kind == "SYSTEM" and not req.include_system and not req.topic:
            continue
        if req.with_offsets:
            ids = set(queues.get(name, ()))
            if config is not None:
                ids.update(range(max(config.read_queue_nums, config.write_queue_nums)))
            for qid in sorted(ids):
                lo, hi = store.min_offset_in_queue(name, qid), store.max_offset_in_queue(name, qid)
                info.queues.append(pb.QueueOffsets(queue_id=qid, min_offset=lo, max_offset=hi))
                info.messages += max(0, hi - lo)
        out.topics.append(info)
    return out


def create_topic(node: "AdminNode", req: pb.TopicRequest, caller: str) -> pb.TopicInfo:
    check_writable_name(req.name)
    changes = _changes(req)
    node.require_master(f"create topic {req.name}")
    n = node.config.current.default_topic_queue_nums
    config = TopicConfig(**{"topic_name": req.name, "read_queue_nums": n,
                            "write_queue_nums": n, **changes})
    what = f"create topic {req.name}"
    try:
        result = _call(what, lambda: _table(node).create(config))
    except TopicExists:
        raise AdminError(grpc.StatusCode.ALREADY_EXISTS,
                         f"topic {req.name} already exists (use update)") from None
    log.warning("admin CreateTopic by %s: %s read %d write %d perm %s order %s (%s)", caller,
                req.name, config.read_queue_nums, config.write_queue_nums,
                perm_name(config.perm), config.order, result.status.value)
    _durable(what, result)
    return to_info(config)


def update_topic(node: "AdminNode", req: pb.TopicRequest, caller: str) -> pb.TopicInfo:
    check_writable_name(req.name)
    changes = _changes(req)
    if not changes:
        raise invalid(f"update topic {req.name}: no field to change was given")
    node.require_master(f"update topic {req.name}")
    what = f"update topic {req.name}"
    try:
        old, config, result = _call(what, lambda: _table(node).update(
            req.name, lambda c: dataclasses.replace(c, **changes)))
    except TopicMissing:
        raise AdminError(grpc.StatusCode.NOT_FOUND,
                         f"topic {req.name} does not exist (use create)") from None
    log.warning("admin UpdateTopic by %s: %s %s -> %s (%s)", caller, req.name,
                _describe(old), _describe(config), result.status.value)
    _durable(what, result)
    return to_info(config)


def delete_topic(node: "AdminNode", req: pb.DeleteTopicRequest, caller: str) -> pb.DeleteTopicResponse:
    check_writable_name(req.name)
    node.require_master(f"delete topic {req.name}")
    what = f"delete topic {req.name}"
    try:
        old, result = _call(what, lambda: _table(node).delete(req.name))
    except TopicMissing:
        raise AdminError(grpc.StatusCode.NOT_FOUND, f"topic {req.name} does not exist") from None
    log.warning("admin DeleteTopic by %s: %s (%s); data kept until retention (%s)", caller,
                req.name, _describe(old), result.status.value)
    _durable(what, result)
    return pb.DeleteTopicResponse(deleted=to_info(old), note=DELETE_NOTE)


def _describe(c: TopicConfig) -> str:
    return (f"read {c.read_queue_nums} write {c.write_queue_nums} perm {perm_name(c.perm)}"
            f"{' order' if c.order else ''}")
