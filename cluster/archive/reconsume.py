"""Re-consume: archived messages sent back to a live cluster through the RocketMQ 5 client
API, as new messages with the original body, keys, tag and user properties, plus
ARCHIVE_ORIGIN naming where they came from (`<group>:<offset msg id>:<UNIQ_KEY>`), to their
original topic or another one. The system properties of the old record (UNIQ_KEY, queue
offsets, delay, transaction marks) are not carried over: the cluster gives the copy its own.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import grpc

from proto import admin_pb2 as admin_pb
from proto import archive_pb2 as pb

from cluster.admin.admin_error import AdminError
from cluster.client.client_errors import ClientError
from cluster.client.connection import Connection
from cluster.client.message import Message
from cluster.client.producer import Producer
from cluster.v2.convert import RESERVED_PROPERTY_NAMES

if TYPE_CHECKING:
    from cluster.archive.archive import Archive

log = logging.getLogger(__name__)

ORIGIN_PROPERTY = "ARCHIVE_ORIGIN"


def copy_of(m: admin_pb.Message, group: str, target_topic: str) -> Message:
    props = {k: v for k, v in m.properties.items()
             if k not in RESERVED_PROPERTY_NAMES and not k.startswith("__")}
    props[ORIGIN_PROPERTY] = f"{group}:{m.msg_id}:{m.unique_key}"
    return Message(topic=target_topic or m.topic, body=m.body, tag=m.tags or None,
                   keys=tuple(k for k in m.keys.split(" ") if k), properties=props)


def send_back(found: Sequence[tuple[str, admin_pb.Message]], target_topic: str,
              connection: Connection) -> list[admin_pb.SendResult]:
    """Send each (group, message) to the cluster, one by one (each may go to another topic);
    the results in the same order. Raises the client's error on the first refusal."""
    producer = Producer(connection)
    out = []
    for group, m in found:
        receipt = producer.send(copy_of(m, group, target_topic))
        out.append(admin_pb.SendResult(msg_id=receipt.message_id,
                                       queue_offset=receipt.offset))
    return out


def reconsume(archive: "Archive", req: pb.ReconsumeRequest) -> pb.ReconsumeResponse:
    """Find each id in the archive and send what was found to `req.cluster_address`. Raises
    AdminError: INVALID_ARGUMENT for a bad request, UNAVAILABLE when the cluster refuses."""
    if not req.msg_ids:
        raise AdminError(grpc.StatusCode.INVALID_ARGUMENT, "msg_ids is empty")
    if not req.cluster_address:
        raise AdminError(grpc.StatusCode.INVALID_ARGUMENT, "cluster_address is required "
                                                           "(host:port of a live node)")
    found, missing = [], []
    for msg_id in req.msg_ids:
        hits, _ = archive.query_groups(req.broker_group,
                                       admin_pb.QueryMessagesRequest(msg_id=msg_id, max_count=1))
        if hits:
            found.append(hits[0])
        else:
            missing.append(msg_id)
    try:
        with Connection(archive.cluster_client(req.cluster_address)) as connection:
            results = send_back(found, req.target_topic, connection)
    except (ClientError, ValueError) as e:
        raise AdminError(grpc.StatusCode.UNAVAILABLE,
                         f"sending to {req.cluster_address} failed: {e}") from None
    log.info("archive: re-sent %d messages to %s (%s), %d not found", len(results),
             req.cluster_address, req.target_topic or "their topics", len(missing))
    return pb.ReconsumeResponse(results=results, not_found=missing)
