"""Membership proofs for tests that drive member-only calls by hand (a raw replication stream,
a bare heartbeat): what a real node sends before the call (cluster/security/member_gate.py)."""
from __future__ import annotations

import grpc

from cluster.security.member_gate import MemberCredentials
from cluster.security.member_proof import REPLICATION_STREAM


def member_metadata(address: str, node_id: str, secret: str,
                    purpose: str = REPLICATION_STREAM) -> list[tuple[str, str]]:
    """Metadata admitting `node_id` to one `purpose` call on the server at `address`."""
    with grpc.insecure_channel(address) as channel:
        return MemberCredentials(secret.encode(), node_id).metadata(channel, purpose)
