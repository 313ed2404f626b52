"""Admin.ShipToArchive: an operator asks the node to ship its sealed commitlog files to the
archive now (cluster/archive/shipper.py), and waits for the archive's acknowledgements."""
from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from proto import admin_pb2 as pb

from cluster.admin.admin_error import AdminError, invalid

if TYPE_CHECKING:
    from cluster.admin.admin_node import AdminNode

DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 600_000


def ship_to_archive(node: "AdminNode", req: pb.ShipToArchiveRequest) -> pb.ShipToArchiveResponse:
    if req.up_to_offset < 0:
        raise invalid(f"up_to_offset {req.up_to_offset} is negative")
    if not 0 <= req.wait_ms <= MAX_WAIT_MS:
        raise invalid(f"wait_ms {req.wait_ms} is out of range 0..{MAX_WAIT_MS}")
    shipper = node.archive_shipper()
    if shipper is None:
        raise AdminError(grpc.StatusCode.FAILED_PRECONDITION,
                         f"{node.node_id} has no archive (archiveAddress is not set)")
    if shipper.released_up_to() is None:
        raise AdminError(grpc.StatusCode.FAILED_PRECONDITION,
                         f"{node.node_id} does not ship as {node.role.name} (archiveShipFrom="
                         f"{shipper.config.ship_from}): ask a node that does")
    sealed_end = max((f.offset + f.size for f in shipper.source.files() if f.sealed), default=0)
    wanted = min(req.up_to_offset, sealed_end) if req.up_to_offset else sealed_end
    shipper.request(wanted)
    released = shipper.wait_released(wanted, (req.wait_ms or DEFAULT_WAIT_MS) / 1000.0)
    s = shipper.stats
    return pb.ShipToArchiveResponse(archived_up_to=released, requested_up_to=wanted,
                                    done=released >= wanted, files_shipped=s.files,
                                    raw_bytes=s.raw_bytes, sent_bytes=s.sent_bytes,
                                    refused=s.refused)
