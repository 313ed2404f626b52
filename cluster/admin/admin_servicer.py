"""gRPC adapter of the Admin API (proto/admin.proto). The bearer token is checked by
cluster.admin.admin_token.BearerTokenInterceptor before any of these methods runs.

The work lives in plain modules that raise AdminError (a status code and a message) and never
see a gRPC context: topic_admin, group_admin, message_lookup, maintenance, runtime_config. This
class only unpacks requests, names the caller for the log of every change, and turns AdminError
(and a StoreError nobody expected, as INTERNAL) into the call's status."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import grpc

from proto import admin_pb2 as pb
from proto import admin_pb2_grpc as pb_grpc
from store.broker_role import BrokerRole
from store.errors import StoreError

from cluster.admin import (archive_request, group_admin, maintenance, message_lookup,
                           runtime_config, store_export, topic_admin)
from cluster.admin.admin_error import AdminError, caller
from cluster.admin.message_lookup import from_record, to_store_message
from cluster.config.node_role import NotMaster

if TYPE_CHECKING:
    from cluster.admin.admin_node import AdminNode

log = logging.getLogger(__name__)


def _answer(context: grpc.ServicerContext, fn, *args):
    """fn(*args), with a refusal turned into the call's status."""
    try:
        return fn(*args)
    except AdminError as e:
        context.abort(e.code, e.message)
    except StoreError as e:
        log.exception("admin call failed in the store")
        context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")


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
    """The gRPC adapter of the Admin API (the module docstring): unpacks each request, names
    the caller in the change log and turns AdminError into the call's status; the work is
    done by the plain admin modules on the AdminNode. Holds nothing but the AdminNode, so it
    takes no lock; calls run concurrently in the server's thread pool."""

    def __init__(self, node: "AdminNode") -> None:
        self.node = node

    def GetNodeStatus(self, request, context):  # noqa: N802
        return self.node.status()

    def SwitchRole(self, request, context):  # noqa: N802
        try:
            role = BrokerRole.parse(request.role)
        except ValueError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if role is BrokerRole.SLAVE and not request.master_address:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "role SLAVE needs master_address")
        if request.epoch < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"epoch {request.epoch} must be >= 0")
        log.warning("admin SwitchRole by %s: to %s (master %s, epoch %d)", caller(context),
                    request.role, request.master_address or "-", request.epoch)
        try:
            self.node.switch_role(role, request.master_address, request.epoch)
        except StoreError as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return self.node.status()

    def SendMessages(self, request, context):  # noqa: N802
        if not request.messages:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no messages")
        host = _born_host(context)
        msgs = [to_store_message(m, host) for m in request.messages]
        # The store's refusal before the topics are learnt: a refused batch writes nothing,
        # not even the record of its topic.
        refusal = self.node.store.check(msgs)
        if refusal is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"send refused ({refusal.status.value}): {refusal.reason}")
        try:
            topic_admin.learn_sent_topics(self.node, msgs)
        except AdminError as e:
            context.abort(e.code, e.message)
        try:
            result = self.node.put_messages(msgs)
        except NotMaster as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"writes go to the master: {e}")
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
        return _answer(context, message_lookup.query, self.node, request)

    def ExportStore(self, request, context):  # noqa: N802
        """Thin adapter of cluster.admin.store_export: request errors -> INVALID_ARGUMENT, a failed
        export -> ABORTED; the export is logged (who, what, how many bytes)."""
        try:
            export = store_export.StoreExport(
                self.node.store, request.include, request.chunk_bytes,
                node_id=self.node.node_id, role=self.node.role.name)
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

    # -- topics ---------------------------------------------------------------------------------
    def ListTopics(self, request, context):  # noqa: N802
        return _answer(context, topic_admin.list_topics, self.node, request)

    def CreateTopic(self, request, context):  # noqa: N802
        return _answer(context, topic_admin.create_topic, self.node, request, caller(context))

    def UpdateTopic(self, request, context):  # noqa: N802
        return _answer(context, topic_admin.update_topic, self.node, request, caller(context))

    def DeleteTopic(self, request, context):  # noqa: N802
        return _answer(context, topic_admin.delete_topic, self.node, request, caller(context))

    # -- consumer groups ------------------------------------------------------------------------
    def ListGroups(self, request, context):  # noqa: N802
        return _answer(context, group_admin.list_groups, self.node)

    def UpsertGroup(self, request, context):  # noqa: N802
        return _answer(context, group_admin.upsert_group, self.node, request, caller(context))

    def DeleteGroup(self, request, context):  # noqa: N802
        return _answer(context, group_admin.delete_group, self.node, request, caller(context))

    def GetConsumerProgress(self, request, context):  # noqa: N802
        return _answer(context, group_admin.progress, self.node, request)

    def ResetOffset(self, request, context):  # noqa: N802
        return _answer(context, group_admin.reset_offset, self.node, request, caller(context))

    # -- store ----------------------------------------------------------------------------------
    def Flush(self, request, context):  # noqa: N802
        return _answer(context, maintenance.flush, self.node, caller(context))

    def TriggerCleanup(self, request, context):  # noqa: N802
        return _answer(context, maintenance.trigger_cleanup, self.node, request, caller(context))

    def GetStoreStats(self, request, context):  # noqa: N802
        return _answer(context, maintenance.stats, self.node)

    def ShipToArchive(self, request, context):  # noqa: N802
        log.info("admin ShipToArchive by %s: up to %d", caller(context), request.up_to_offset)
        return _answer(context, archive_request.ship_to_archive, self.node, request)

    # -- configuration --------------------------------------------------------------------------
    def GetConfig(self, request, context):  # noqa: N802
        return _answer(context, runtime_config.get_config, self.node, request)

    def UpdateConfig(self, request, context):  # noqa: N802
        return _answer(context, runtime_config.update_config, self.node, request, caller(context))
