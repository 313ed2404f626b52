"""gRPC adapter of the Admin API (proto/admin.proto). The bearer token is checked by
cluster.auth.BearerTokenInterceptor before any of these methods runs."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import grpc

from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc
from store import codec
from store.codec import Message, MessageRecord
from store.errors import StoreError

from . import store_export

if TYPE_CHECKING:
    from .node import Node

log = logging.getLogger(__name__)
ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


def to_store_message(m: pb.Message, born_host: str) -> Message:
    props = dict(m.properties)
    if m.tags:
        props[codec.PROPERTY_TAGS] = m.tags
    if m.keys:
        props[codec.PROPERTY_KEYS] = m.keys
    if m.unique_key:
        props[codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = m.unique_key
    return Message(topic=m.topic, body=m.body, queue_id=m.queue_id, properties=props,
                   born_timestamp=m.born_timestamp, born_host=born_host)


def from_record(r: MessageRecord) -> pb.Message:
    ip, port = codec.parse_host(r.store_host)
    return pb.Message(topic=r.topic, queue_id=r.queue_id, tags=r.tags or "",
                      keys=" ".join(r.keys), body=r.body, properties=r.properties,
                      msg_id=codec.offset_msg_id(ip, port, r.physical_offset),
                      queue_offset=r.queue_offset, commit_log_offset=r.physical_offset,
                      store_timestamp=r.store_timestamp, born_timestamp=r.born_timestamp,
                      unique_key=r.uniq_key or "")


def _born_host(context: grpc.ServicerContext) -> str:
    peer = context.peer()  # "ipv4:127.0.0.1:5555" / "ipv6:[::1]:5555"
    kind, _, rest = peer.partition(":")
    if kind == "ipv4" and rest.count(":") == 1:
        return rest
    if kind == "ipv6" and rest.startswith("["):
        host, _, port = rest[1:].partition("]:")
        return f"{host}:{port}" if port.isdigit() else "127.0.0.1:0"
    return "127.0.0.1:0"


class AdminServicer(pb_grpc.AdminServicer):
    def __init__(self, node: "Node") -> None:
        self.node = node

    def GetNodeStatus(self, request, context):  # noqa: N802
        return self.node.status()

    def SwitchRole(self, request, context):  # noqa: N802
        if request.role not in ROLES:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"role {request.role!r}: must be one of {', '.join(ROLES)}")
        if request.role == "SLAVE" and not request.master_address:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "role SLAVE needs master_address")
        if request.epoch < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"epoch {request.epoch} must be >= 0")
        log.warning("SwitchRole to %s (master %s, epoch %d) requested by %s", request.role,
                    request.master_address or "-", request.epoch, context.peer())
        try:
            self.node.switch_role(request.role, request.master_address, request.epoch)
        except StoreError as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return self.node.status()

    def SendMessages(self, request, context):  # noqa: N802
        if not request.messages:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no messages")
        host = _born_host(context)
        msgs = [to_store_message(m, host) for m in request.messages]
        try:
            result = self.node.put_messages(msgs)
        except StoreError as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return pb.SendMessagesResponse(
            status=result.status.value, reason=result.reason,
            results=[pb.SendResult(msg_id=a.msg_id, queue_offset=a.queue_offset,
                                   commit_log_offset=a.wrote_offset, queue_id=m.queue_id)
                     for a, m in zip(result.appends, msgs)])

    def GetMessages(self, request, context):  # noqa: N802
        if not request.topic:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "topic is required")
        if request.queue_id < 0 or request.offset < 0 or request.max_count < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "queue_id, offset and max_count must be >= 0")
        expr = request.tag_expression or None
        try:
            r = self.node.store.get_messages(request.topic, request.queue_id, request.offset,
                                             request.max_count or 32, expr)
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        return pb.GetMessagesResponse(status=r.status.value, next_offset=r.next_begin_offset,
                                      min_offset=r.min_offset, max_offset=r.max_offset,
                                      messages=[from_record(m) for m in r.messages])

    def QueryMessages(self, request, context):  # noqa: N802
        if not request.topic or not request.key:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "topic and key are required")
        records = self.node.store.query_messages(request.topic, request.key, request.max_count or 32)
        return pb.GetMessagesResponse(status="FOUND" if records else "NO_MATCHED_MESSAGE",
                                      messages=[from_record(m) for m in records])

    def ExportStore(self, request, context):  # noqa: N802
        """Thin adapter of cluster.store_export: request errors -> INVALID_ARGUMENT, a failed
        export -> ABORTED; the export is logged (who, what, how many bytes)."""
        try:
            export = store_export.StoreExport(
                self.node.store, request.include, request.chunk_bytes,
                node_id=self.node.config.node_id, role=self.node.role)
        except store_export.ExportRequestError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        peer = context.peer()
        stats = export.stats
        outcome = "cancelled"
        stream = export.messages()
        try:
            for i, message in enumerate(stream):
                if i == 0:
                    log.info("ExportStore by %s: %s, %d files, %d bytes, commitlog end %d, "
                             "chunks of %d bytes", peer, ",".join(export.parts),
                             len(message.manifest.files), stats.total_bytes,
                             stats.commitlog_end_offset, export.chunk_bytes)
                yield message
            outcome = "done"
        except store_export.ExportAborted as e:
            outcome = f"aborted: {e}"
            context.abort(grpc.StatusCode.ABORTED, str(e))
        except store_export.ExportPathError as e:
            outcome = f"failed: {e}"
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except Exception as e:
            outcome = f"failed: {e!r}"
            raise
        finally:
            stream.close()  # releases what the export opened, also when the client went away
            elapsed = time.monotonic() - stats.started
            log.info("ExportStore by %s %s: %d/%d bytes in %d files, %.1f s", peer, outcome,
                     stats.bytes_sent, stats.total_bytes, stats.files, elapsed)
