"""The Archive gRPC service (proto/archive.proto): a thin adapter of cluster.archive.archive.

ShipFile and FileStatus are member-only (the cluster secret's challenge-response, like
replication); the reads and Reconsume need the archive's admin token (the server's
BearerTokenInterceptor). Refusals map UploadRefused / AdminError / ValueError to statuses.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator

import grpc

from proto import archive_pb2 as pb
from proto import archive_pb2_grpc as pb_grpc

from cluster.admin.admin_error import AdminError
from cluster.archive.archive import Archive, Block
from cluster.archive.reconsume import reconsume
from cluster.archive.upload import UploadHeader, UploadRefused

log = logging.getLogger(__name__)

SERVICE = "rmqstore.archive.v1.Archive"
PROTECTED = tuple(f"/{SERVICE}/{m}" for m in ("ListHoldings", "QueryMessages", "Reconsume"))

Admit = Callable[[grpc.ServicerContext], str]


def _abort(context, e: UploadRefused):
    context.abort(getattr(grpc.StatusCode, e.code), str(e))


class ArchiveServicer(pb_grpc.ArchiveServicer):
    """The Archive gRPC adapter (the module docstring): admits members for ShipFile and
    FileStatus, hands each call to the Archive and maps its refusals to statuses. Holds only
    the Archive and the admit function, so it takes no lock; calls run in the server's pool."""

    def __init__(self, archive: Archive, admit: Admit) -> None:
        self.archive = archive
        self.admit = admit

    def ShipFile(self, request_iterator, context):  # noqa: N802
        node = self.admit(context)
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("part") != "header":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a ShipFile stream starts with a "
                                                            "ShipHeader")
        h = first.header
        try:
            header = UploadHeader(h.broker_group, h.file_offset, h.file_size, h.resume_from,
                                  h.file_crc32c, h.codec, h.source_node or node)
            result = self.archive.receive(header, _blocks(request_iterator))
        except UploadRefused as e:
            log.warning("archive: ShipFile %s/%d from %s refused: %s", h.broker_group,
                        h.file_offset, node, e)
            _abort(context, e)
        return pb.ShipAck(status=result.status, file_offset=result.file_offset,
                          stored_bytes=result.stored_bytes,
                          received_bytes=result.received_bytes)

    def FileStatus(self, request, context):  # noqa: N802
        self.admit(context)
        try:
            held, partial, crc, newest = self.archive.file_status(request.broker_group,
                                                                  request.file_offset)
        except UploadRefused as e:
            _abort(context, e)
        return pb.FileStatusReply(held=held, partial_bytes=partial, file_crc32c=crc,
                                  newest_offset=newest)

    def ListHoldings(self, request, context):  # noqa: N802
        try:
            return holdings(self.archive, request.broker_group)
        except UploadRefused as e:
            _abort(context, e)

    def QueryMessages(self, request, context):  # noqa: N802
        try:
            return self.archive.query(request.broker_group, request.query)
        except AdminError as e:
            context.abort(e.code, e.message)
        except UploadRefused as e:
            _abort(context, e)

    def Reconsume(self, request, context):  # noqa: N802
        try:
            return reconsume(self.archive, request)
        except AdminError as e:
            context.abort(e.code, e.message)
        except UploadRefused as e:
            _abort(context, e)


def holdings(archive: Archive, group: str) -> pb.Holdings:
    """ListHoldings' answer (also the HTTP endpoint's)."""
    out = pb.Holdings(archive_id=archive.archive_id)
    for g in archive.holdings(group):
        first, last = g.time_range()
        out.groups.append(pb.GroupHoldings(
            broker_group=g.name, first_store_timestamp=first, last_store_timestamp=last,
            files=[pb.ArchivedFile(file_offset=e.offset, file_size=e.size,
                                   file_crc32c=e.crc32c, records=e.records,
                                   first_store_timestamp=e.first_store_timestamp,
                                   last_store_timestamp=e.last_store_timestamp,
                                   archived_at_ms=e.archived_at_ms, indexed=e.indexed)
                   for e in g.entries]))
    return out


def _blocks(chunks) -> Iterator[Block]:
    for c in chunks:
        if c.WhichOneof("part") != "block":
            raise UploadRefused("INVALID_ARGUMENT", "a second ShipHeader in one stream")
        yield c.block.data, c.block.raw_length, c.block.raw_crc32c
