"""Consumer groups of the Admin API: list, create/update, delete, progress (lag per queue) and
offset reset, over the master's consumer state (`node.consumers`, cluster/consume/).

The consumer state lives on the master (a slave keeps none: it forwards consumer calls), so
every call here needs the master, reads included. The state's own refusals (apache.rocketmq.v2
codes in a V2Error) become gRPC codes: ILLEGAL_* and BAD_REQUEST -> INVALID_ARGUMENT,
*_NOT_FOUND -> NOT_FOUND, anything else -> FAILED_PRECONDITION.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, TypeVar

import grpc

from proto import admin_pb2 as pb
from proto.apache.rocketmq.v2 import definition_pb2 as d

from cluster.admin.admin_error import AdminError, invalid
from cluster.v2.v2_status import V2Error

if TYPE_CHECKING:
    from cluster.admin.admin_node import AdminNode
    from cluster.consume.consumer_service import ConsumerService

log = logging.getLogger(__name__)
T = TypeVar("T")


def grpc_code(v2_code: int) -> grpc.StatusCode:
    name = d.Code.Name(v2_code) if v2_code in d.Code.values() else ""
    if name.startswith("ILLEGAL_") or name == "BAD_REQUEST":
        return grpc.StatusCode.INVALID_ARGUMENT
    if name.endswith("_NOT_FOUND"):
        return grpc.StatusCode.NOT_FOUND
    return grpc.StatusCode.FAILED_PRECONDITION


def _consumers(node: "AdminNode", what: str) -> "ConsumerService":
    node.require_master(what)
    return node.consumers


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except V2Error as e:
        raise AdminError(grpc_code(e.code), f"{what}: {e.message}") from None


def _info(g) -> pb.GroupInfo:
    return pb.GroupInfo(name=g.name, fifo=g.fifo, retry_max_times=g.retry_max_times,
                        consume_enable=g.consume_enable)


def _need_name(name: str, what: str) -> None:
    if not name:
        raise invalid(f"{what}: the group name is empty")


def list_groups(node: "AdminNode") -> pb.ListGroupsResponse:
    consumers = _consumers(node, "list groups")
    groups = _call("list groups", consumers.list_groups)
    return pb.ListGroupsResponse(groups=[_info(g) for g in groups])


def upsert_group(node: "AdminNode", req: pb.UpsertGroupRequest, caller: str) -> pb.GroupInfo:
    what = f"upsert group {req.name}"
    _need_name(req.name, what)
    consumers = _consumers(node, what)
    kwargs = {f: getattr(req, f) for f in ("fifo", "retry_max_times", "consume_enable")
              if req.HasField(f)}
    info = _call(what, lambda: consumers.upsert_group(req.name, **kwargs))
    log.warning("admin UpsertGroup by %s: %s fifo=%s retry_max_times=%d consume_enable=%s",
                caller, info.name, info.fifo, info.retry_max_times, info.consume_enable)
    return _info(info)


def delete_group(node: "AdminNode", req: pb.DeleteGroupRequest, caller: str) -> pb.DeleteGroupResponse:
    what = f"delete group {req.name}"
    _need_name(req.name, what)
    consumers = _consumers(node, what)
    if not _call(what, lambda: consumers.delete_group(req.name)):
        raise AdminError(grpc.StatusCode.NOT_FOUND, f"consumer group {req.name} does not exist")
    log.warning("admin DeleteGroup by %s: %s (its offsets and in-flight messages are forgotten)",
                caller, req.name)
    return pb.DeleteGroupResponse(deleted=True)


def progress(node: "AdminNode", req: pb.ConsumerProgressRequest) -> pb.ConsumerProgress:
    what = f"progress of group {req.group}"
    _need_name(req.group, what)
    consumers = _consumers(node, what)
    rows = _call(what, lambda: consumers.progress(req.group))
    out = pb.ConsumerProgress(group=req.group)
    for q in rows:
        out.queues.append(pb.QueueProgress(topic=q.topic, queue_id=q.queue_id,
                                           committed_offset=q.committed_offset,
                                           max_offset=q.max_offset, lag=q.lag, inflight=q.inflight))
        out.total_lag += q.lag
        out.total_inflight += q.inflight
    return out


def reset_offset(node: "AdminNode", req: pb.ResetOffsetRequest, caller: str) -> pb.ResetOffsetResponse:
    what = f"reset offset of group {req.group} on {req.topic}"
    _need_name(req.group, what)
    if not req.topic:
        raise invalid(f"{what}: the topic is empty")
    target = req.WhichOneof("target")
    if target is None:
        raise invalid(f"{what}: give an offset or a timestamp_ms")
    if target == "timestamp_ms" and req.timestamp_ms < 0:
        raise invalid(f"{what}: timestamp_ms {req.timestamp_ms} is negative")
    if req.HasField("queue_id") and req.queue_id < 0:
        raise invalid(f"{what}: queue_id {req.queue_id} is negative")
    consumers = _consumers(node, what)
    kwargs = {"queue_id": req.queue_id if req.HasField("queue_id") else None,
              target: getattr(req, target)}
    moved = _call(what, lambda: consumers.reset_offset(req.group, req.topic, **kwargs))
    log.warning("admin ResetOffset by %s: group %s topic %s queue %s to %s %d -> %s", caller,
                req.group, req.topic, kwargs["queue_id"] if kwargs["queue_id"] is not None
                else "all", target, getattr(req, target), moved)
    return pb.ResetOffsetResponse(offsets=[pb.QueueOffset(queue_id=q, offset=o) for q, o in moved])
