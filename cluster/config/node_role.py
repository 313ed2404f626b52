"""What this node is now, and the one rule for where a call that needs the master goes.

A node is in exactly one of three states:

    Leader(kind, epoch, master)   ASYNC_MASTER or SYNC_MASTER in epoch E: it appends, and it
                                  owns the consumer state and the transactions; `master` is the
                                  MasterRole that carries its writes and replication
    Follower(master_address)      SLAVE of the node at that address: reads are served locally,
                                  writes and consumer calls are forwarded to it
    Transitioning(reason)         starting, switching role or stopping: whatever needs the
                                  master is refused with a retryable reason

`Role` holds the current state and answers, in one place, the questions every feature asks
(admin, messaging, consume, transactions):

    role.require_master()              -> MasterRole              or raises NotMaster
    role.route(forwarded=...)          -> MasterRole | Forward    or raises NotMaster
        a Leader answers itself; a Follower forwards to its master, unless the call was
        forwarded to it already (a forwarded call is never forwarded again: two nodes that
        each believe the other is master must not bounce a write between them)

Locking: the state is one immutable object behind one reference. The node replaces it under
its role lock (cluster/assembly/node.py); readers take no lock and act on the state they read. A
state read just before a switch may name a MasterRole that has since stopped: its appends then
answer SERVICE_NOT_AVAILABLE, which callers treat like any refused write.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.broker_role import BrokerRole

if TYPE_CHECKING:
    from master.master_role import MasterRole


@dataclass(frozen=True)
class Leader:
    kind: BrokerRole  # ASYNC_MASTER or SYNC_MASTER
    epoch: int
    master: "MasterRole"


@dataclass(frozen=True)
class Follower:
    master_address: str


@dataclass(frozen=True)
class Transitioning:
    reason: str


RoleState = Leader | Follower | Transitioning


@dataclass(frozen=True)
class Forward:
    """Send the call on to the master at `address`."""
    address: str


class NotMaster(Exception):
    """This node cannot answer a call that needs the master (it is a slave that may not
    forward, or it is between roles). `master_address` is where the master is, when known."""

    def __init__(self, reason: str, master_address: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.master_address = master_address


class Role:
    """The current role of one node (see the module doc). Owns only the state reference."""

    def __init__(self, node_id: str, state: RoleState = Transitioning("starting")) -> None:
        self.node_id = node_id
        self._state: RoleState = state

    @property
    def state(self) -> RoleState:
        return self._state

    def set(self, state: RoleState) -> None:
        """The node's role switch calls this (under its role lock)."""
        self._state = state

    # -- what this node is ------------------------------------------------------------------
    @property
    def kind(self) -> BrokerRole | None:
        """ASYNC_MASTER / SYNC_MASTER / SLAVE, or None while transitioning."""
        state = self._state
        if isinstance(state, Leader):
            return state.kind
        return BrokerRole.SLAVE if isinstance(state, Follower) else None

    @property
    def name(self) -> str:
        """The role as operators read it: a BrokerRole name, or TRANSITIONING."""
        kind = self.kind
        return kind.value if kind is not None else "TRANSITIONING"

    @property
    def master(self) -> "MasterRole | None":
        """The MasterRole while this node leads, else None."""
        state = self._state
        return state.master if isinstance(state, Leader) else None

    @property
    def followed_address(self) -> str:
        """The master's address while this node follows one, else ""."""
        state = self._state
        return state.master_address if isinstance(state, Follower) else ""

    # -- the one rule -----------------------------------------------------------------------
    def not_master_reason(self) -> str:
        state = self._state
        if isinstance(state, Follower):
            return f"{self.node_id} is a slave of {state.master_address}"
        if isinstance(state, Transitioning):
            return f"{self.node_id} is changing role ({state.reason}); retry in a moment"
        return f"{self.node_id} is the master"

    def require_master(self) -> "MasterRole":
        """The MasterRole, or NotMaster naming where the master is."""
        state = self._state
        if isinstance(state, Leader):
            return state.master
        raise NotMaster(self.not_master_reason(), self.followed_address)

    def route(self, *, forwarded: bool) -> "MasterRole | Forward":
        """Where a call that needs the master is answered: here (the MasterRole) or at the
        followed master (Forward). A call that was already forwarded once is never forwarded
        again; NotMaster then, as while transitioning."""
        state = self._state
        if isinstance(state, Leader):
            return state.master
        if isinstance(state, Follower):
            if forwarded:
                raise NotMaster(f"{self.not_master_reason()}, not the master (a forwarded call "
                                f"is never forwarded again)", state.master_address)
            return Forward(state.master_address)
        raise NotMaster(self.not_master_reason())
