"""gRPC adapters of membership (member_proof.py holds the rules): the server's gate and
Challenge servicer, and the client's credentials.

Server: a node registers `MembershipServicer(gate)` and hands `gate.admission` to the
replication servicer (an asyncio handler: it awaits the abort itself); the controller hands
`gate.admit` the context of its Heartbeat. A refused call ends with UNAUTHENTICATED (or
FAILED_PRECONDITION when the server has no secret) and a message naming the reason; the refusal
is logged with the peer's address, once per peer and reason every refusal_log.LOG_EVERY_S (a
peer retrying in a loop must not flood the log).

Client: `MemberCredentials.metadata(channel, purpose)` asks the server for a challenge,
checks the server's own proof, and returns the metadata of one call.
"""
from __future__ import annotations

import logging
import threading

import grpc

from proto import membership_pb2 as pb
from proto import membership_pb2_grpc as pb_grpc
from common.clock import SYSTEM_CLOCK, Clock
from common.config_values import ConfigError

from cluster.security import member_proof
from cluster.security.member_proof import ChallengeBook, MembershipRefused
from cluster.security.refusal_log import RefusalLog

log = logging.getLogger(__name__)
CHALLENGE = "/rmqstore.membership.v1.Membership/Challenge"
NO_SECRET = ("this server has no cluster secret (clusterSecret or clusterSecretFile), so it "
             "admits no replication or controller peer")


def resolve_cluster_secret(inline: str, path: str) -> bytes | None:
    """The cluster secret from the config (inline or a file), or None when neither is set."""
    if inline and path:
        raise ConfigError("set clusterSecret or clusterSecretFile, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                inline = f.read().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read clusterSecretFile {path}: {e}") from e
        where = f"clusterSecretFile {path}"
    else:
        where = "clusterSecret"
    if not inline:
        return None
    try:
        return member_proof.check_secret(inline, where)
    except ValueError as e:
        raise ConfigError(str(e)) from None


class Refusal(Exception):
    """A call the gate does not admit: the status and message to end it with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class MemberGate:
    """Admits member peers to member-only calls. Owns the ChallengeBook, which `_lock` guards
    (Challenge and admit run on gRPC's handler threads), and the throttled refusal log."""

    def __init__(self, secret: bytes | None, server_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.server_id = server_id
        self._secret = secret
        self._clock = clock
        self._book = ChallengeBook(secret, clock) if secret is not None else None
        self._lock = threading.Lock()
        self._log = RefusalLog(log, logging.WARNING, clock)

    @property
    def enabled(self) -> bool:
        return self._book is not None

    def challenge(self, request: pb.ChallengeRequest, context) -> pb.ChallengeResponse:
        if self._book is None:
            self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION, NO_SECRET, CHALLENGE)
        try:
            with self._lock:
                nonce, proof = self._book.issue(request.purpose, request.node_id,
                                                request.client_nonce)
        except MembershipRefused as e:
            self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, f"bad challenge: {e}",
                         CHALLENGE)
        return pb.ChallengeResponse(server_nonce=nonce, server_proof=proof,
                                    server_id=self.server_id)

    def admission(self, peer: str, metadata, purpose: str) -> str:
        """The node id the call's proof (in `metadata`) admits; raises Refusal otherwise (it
        is logged). For handlers on an event loop, where aborting is a coroutine."""
        if self._book is None:
            raise self._refusal(peer, grpc.StatusCode.FAILED_PRECONDITION, NO_SECRET, purpose)
        value = None
        for key, val in metadata or ():
            if key == member_proof.HEADER:
                value = val if isinstance(val, str) else None
        try:
            presented = member_proof.parse_header(value)
            with self._lock:
                return self._book.admit(purpose, presented)
        except MembershipRefused as e:
            raise self._refusal(peer, grpc.StatusCode.UNAUTHENTICATED,
                                f"not admitted as a cluster member: {e}", purpose) from None

    def admit(self, context, purpose: str) -> str:
        """The node id the call's proof admits; otherwise the call is aborted (a synchronous
        handler's context, whose abort raises)."""
        try:
            return self.admission(context.peer() or "?", context.invocation_metadata(), purpose)
        except Refusal as e:
            context.abort(e.code, e.message)
            raise  # abort raises; this keeps a context whose abort does not from passing

    def _refusal(self, peer: str, code: grpc.StatusCode, message: str, method: str) -> "Refusal":
        self._log.refused(method, peer or "?", message)
        return Refusal(code, message)

    def _refuse(self, context, code: grpc.StatusCode, message: str, method: str):
        refusal = self._refusal(context.peer(), code, message, method)
        context.abort(code, message)
        raise refusal

    @property
    def refusals(self) -> int:
        return self._log.refusals


class MembershipServicer(pb_grpc.MembershipServicer):
    """The Membership gRPC service: hands each Challenge to the MemberGate, which issues and
    later checks the proofs. Holds only the gate."""

    def __init__(self, gate: MemberGate) -> None:
        self.gate = gate

    def Challenge(self, request, context):  # noqa: N802
        return self.gate.challenge(request, context)


class MemberCredentials:
    """A node's side: proves `node_id` with the cluster secret before each member-only call."""

    def __init__(self, secret: bytes | None, node_id: str) -> None:
        self.secret = secret
        self.node_id = node_id

    def metadata(self, channel: grpc.Channel, purpose: str,
                 timeout: float = 5.0) -> list[tuple[str, str]]:
        """Metadata admitting one `purpose` call on `channel`, asked in the calling thread.
        Raises grpc.RpcError when the server cannot be asked, MembershipRefused when it is not
        a member itself or when this node has no secret. A caller on an event loop asks over
        its grpc.aio channel itself: `challenge`, await the Challenge call, `header`."""
        request = self.challenge(purpose)
        answer = pb_grpc.MembershipStub(channel).Challenge(request, timeout=timeout)
        return self.header(request, answer)

    def challenge(self, purpose: str) -> pb.ChallengeRequest:
        """The request that asks a server to prove it is a member, for one `purpose`."""
        if self.secret is None:
            raise MembershipRefused("this node has no cluster secret (clusterSecret or "
                                    "clusterSecretFile): members will not admit it")
        return pb.ChallengeRequest(node_id=self.node_id, purpose=purpose,
                                   client_nonce=member_proof.new_client_nonce())

    def header(self, request: pb.ChallengeRequest,
                answer: pb.ChallengeResponse) -> list[tuple[str, str]]:
        """The proof header, once the server proved it is a member too."""
        assert self.secret is not None
        member_proof.check_server_proof(self.secret, request.purpose, self.node_id,
                                        request.client_nonce, answer.server_nonce,
                                        answer.server_proof)
        return [member_proof.client_header(self.secret, request.purpose, self.node_id,
                                           request.client_nonce, answer.server_nonce)]
