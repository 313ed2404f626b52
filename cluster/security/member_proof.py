"""Membership proofs over the cluster secret: the rules, without I/O (tested in memory).

A member-only call (the replication stream, the controller's heartbeat) is preceded by a
challenge, so the secret never crosses the wire and a recorded proof cannot be replayed:

    peer                                              server (a node or the controller)
    Challenge(node_id, purpose, client_nonce) ──────> ChallengeBook.issue: server_nonce, kept
                                                      for NONCE_TTL_S, usable once
              <────────────────────────────────────── server_nonce, proof("server", ...)
    check_server_proof: the server knows the secret
    <purpose> call, metadata x-rmq-member ──────────> ChallengeBook.admit: the nonce is taken
                                                      (gone even when the proof is wrong), then
                                                      proof("client", ...) compared

    proof(side) = HMAC-SHA256(secret, "rmqstore-member-v1" NUL side NUL purpose NUL node_id
                                      NUL client_nonce NUL server_nonce)   nonces as hex

The proof binds the side (a server's proof is not a client's), the method (a heartbeat's
proof does not open a replication stream) and the node id (the server holds the caller to
it). The metadata value is `v1 <node_id> <client_nonce hex> <server_nonce hex> <proof hex>`.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import os
from dataclasses import dataclass

from common.clock import Clock

HEADER = "x-rmq-member"
REPLICATION_STREAM = "/rmqstore.replication.v1.Replication/Stream"
CONTROLLER_HEARTBEAT = "/rmqstore.controller.v1.Controller/Heartbeat"
ARCHIVE_SHIP = "/rmqstore.archive.v1.Archive/ShipFile"  # also FileStatus, its resume question
ARCHIVE_ANNOUNCE = "/rmqstore.controller.v1.Controller/AnnounceArchive"
REGISTER_TOPICS = "/rmqstore.controller.v1.Controller/RegisterTopics"
GET_CLUSTER_ROUTE = "/rmqstore.controller.v1.Controller/GetClusterRoute"
PURPOSES = (REPLICATION_STREAM, CONTROLLER_HEARTBEAT, ARCHIVE_SHIP,
            ARCHIVE_ANNOUNCE, REGISTER_TOPICS, GET_CLUSTER_ROUTE)  # the member-only calls
VERSION = "v1"
NONCE_TTL_S = 30.0
MAX_OUTSTANDING = 4096  # challenges nobody answered are dropped oldest first beyond this
MIN_SECRET_LENGTH = 16
CLIENT_NONCE_BYTES = (16, 64)
SERVER_NONCE_BYTES = 32


class MembershipRefused(PermissionError):
    """Why a peer is not admitted (its message names the reason; the adapter adds the peer).
    A PermissionError, so master/ and slave/ catch it without importing cluster/."""


def check_secret(secret: str, where: str) -> bytes:
    """The secret as bytes, or ConfigError-worthy ValueError naming `where` it came from."""
    if len(secret) < MIN_SECRET_LENGTH:
        raise ValueError(f"{where}: the cluster secret must be at least {MIN_SECRET_LENGTH} "
                         f"characters (it has {len(secret)})")
    return secret.encode()


def check_node_id(node_id: str) -> None:
    if not node_id or len(node_id) > 256 or any(ch.isspace() for ch in node_id):
        raise MembershipRefused(f"node id {node_id[:64]!r} is empty, longer than 256 "
                                f"characters or contains spaces")


def proof(secret: bytes, side: str, purpose: str, node_id: str, client_nonce: bytes,
          server_nonce: bytes) -> bytes:
    transcript = "\0".join((f"rmqstore-member-{VERSION}", side, purpose, node_id,
                            client_nonce.hex(), server_nonce.hex()))
    return hmac.new(secret, transcript.encode(), hashlib.sha256).digest()


def new_client_nonce() -> bytes:
    return os.urandom(CLIENT_NONCE_BYTES[0])


def check_server_proof(secret: bytes, purpose: str, node_id: str, client_nonce: bytes,
                       server_nonce: bytes, server_proof: bytes) -> None:
    """Raises MembershipRefused unless the server's proof shows it knows the secret."""
    expected = proof(secret, "server", purpose, node_id, client_nonce, server_nonce)
    if not hmac.compare_digest(expected, server_proof):
        raise MembershipRefused("the server does not know the cluster secret (its proof does "
                                "not match): not a member of this cluster")


def client_header(secret: bytes, purpose: str, node_id: str, client_nonce: bytes,
                  server_nonce: bytes) -> tuple[str, str]:
    """The metadata entry that admits `node_id` to one `purpose` call."""
    p = proof(secret, "client", purpose, node_id, client_nonce, server_nonce)
    return HEADER, f"{VERSION} {node_id} {client_nonce.hex()} {server_nonce.hex()} {p.hex()}"


@dataclass(frozen=True)
class PresentedProof:
    node_id: str
    client_nonce: bytes
    server_nonce: bytes
    proof: bytes


def parse_header(value: str | None) -> PresentedProof:
    if value is None:
        raise MembershipRefused(f"no membership proof ({HEADER} metadata): member-only call")
    parts = value.split(" ")
    if len(parts) != 5 or parts[0] != VERSION:
        raise MembershipRefused(f"malformed {HEADER} metadata (want '{VERSION} <node id> "
                                f"<client nonce> <server nonce> <proof>')")
    try:
        cn, sn, p = (bytes.fromhex(x) for x in parts[2:])
    except ValueError:
        raise MembershipRefused(f"malformed {HEADER} metadata: nonces and proof are hex") from None
    return PresentedProof(parts[1], cn, sn, p)


@dataclass
class _Issued:
    purpose: str
    node_id: str
    client_nonce: bytes
    expires: float


class ChallengeBook:
    """The server side: the challenges it issued and has not seen answered.

    Owns the outstanding nonces (at most MAX_OUTSTANDING, each NONCE_TTL_S); no lock of its
    own: the adapter (member_gate.MemberGate) calls it under its lock. Time from `clock`.
    """

    def __init__(self, secret: bytes, clock: Clock, ttl_s: float = NONCE_TTL_S,
                 max_outstanding: int = MAX_OUTSTANDING) -> None:
        self._secret = secret
        self._clock = clock
        self._ttl = ttl_s
        self._max = max_outstanding
        self._issued: collections.OrderedDict[bytes, _Issued] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._issued)

    def issue(self, purpose: str, node_id: str, client_nonce: bytes,
              server_nonce: bytes | None = None) -> tuple[bytes, bytes]:
        """(server_nonce, server_proof) for a Challenge; MembershipRefused on bad fields."""
        check_node_id(node_id)
        low, high = CLIENT_NONCE_BYTES
        if not low <= len(client_nonce) <= high:
            raise MembershipRefused(f"client_nonce must be {low}..{high} bytes "
                                    f"(got {len(client_nonce)})")
        if purpose not in PURPOSES:
            raise MembershipRefused(f"purpose {purpose[:80]!r} is not a member-only call "
                                    f"({', '.join(PURPOSES)})")
        now = self._clock.monotonic()
        self._expire(now)
        while len(self._issued) >= self._max:
            self._issued.popitem(last=False)
        nonce = server_nonce if server_nonce is not None else os.urandom(SERVER_NONCE_BYTES)
        self._issued[nonce] = _Issued(purpose, node_id, client_nonce, now + self._ttl)
        return nonce, proof(self._secret, "server", purpose, node_id, client_nonce, nonce)

    def admit(self, purpose: str, presented: PresentedProof) -> str:
        """The node id the proof admits to `purpose`, or MembershipRefused naming why. The
        nonce is used up either way: a wrong guess cannot be retried on the same nonce."""
        now = self._clock.monotonic()
        self._expire(now)
        issued = self._issued.pop(presented.server_nonce, None)
        if issued is None:
            raise MembershipRefused("unknown, expired or already used challenge nonce "
                                    "(ask Membership/Challenge right before the call)")
        if issued.purpose != purpose:
            raise MembershipRefused(f"the challenge was issued for {issued.purpose}, not "
                                    f"{purpose}")
        if issued.node_id != presented.node_id or issued.client_nonce != presented.client_nonce:
            raise MembershipRefused("the proof does not answer the challenge it names "
                                    "(node id or client nonce differs)")
        expected = proof(self._secret, "client", purpose, presented.node_id,
                         presented.client_nonce, presented.server_nonce)
        if not hmac.compare_digest(expected, presented.proof):
            raise MembershipRefused("wrong cluster secret (the membership proof does not match)")
        return presented.node_id

    def _expire(self, now: float) -> None:
        while self._issued:
            nonce, first = next(iter(self._issued.items()))
            if first.expires > now:
                return
            del self._issued[nonce]
