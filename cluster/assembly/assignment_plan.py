"""What a node does with the controller's answer, decided without I/O.

    plan_assignment(state, node_epoch, assignment) -> AssignmentPlan

- No role in the answer (no master elected, or this node must wait to be elected again): keep
  what it is now. A master keeps serving only as long as its lease lets it.
- SLAVE of A: follow A, unless it already does.
- A master role in epoch E:
  - already the leader in E: keep, take the approved sync state set, renew the lease (and switch
    between ASYNC and SYNC in place if the flavour changed);
  - otherwise become master in E, unless E is not after this node's own last epoch: an epoch is
    never reused or taken backwards (fencing; the controller sees the node's report and elects
    again with a higher epoch).
"""
from __future__ import annotations

from dataclasses import dataclass

from store.broker_role import BrokerRole

from cluster.controller.election import Assignment
from cluster.config.node_role import Follower, Leader, RoleState


@dataclass(frozen=True)
class AssignmentPlan:
    """What a node does with the controller's answer: the role to switch to (None: keep it),
    the master to follow or the epoch to lead in, the approved sync state set and lease to
    renew as leader, or why the answer cannot be carried out."""

    switch_to: BrokerRole | None = None  # None: keep the current role
    master_address: str = ""  # for a switch to SLAVE
    epoch: int = 0  # for a switch to a master role
    approved: frozenset[str] | None = None  # for the leader: slaves of the sync state set
    lease_ms: int = 0  # for the leader: renew the write lease
    refusal: str = ""  # why the answer cannot be carried out


def plan_assignment(state: RoleState, node_id: str, node_epoch: int,
                    a: Assignment) -> AssignmentPlan:
    if a.role is None:
        return AssignmentPlan()
    if a.role is BrokerRole.SLAVE:
        if not a.master_address:
            return AssignmentPlan(refusal="the controller named no master address")
        if isinstance(state, Follower) and state.master_address == a.master_address:
            return AssignmentPlan()
        return AssignmentPlan(switch_to=BrokerRole.SLAVE, master_address=a.master_address)
    approved = frozenset(a.sync_state_set) - {node_id}
    if isinstance(state, Leader) and state.epoch == a.epoch:
        return AssignmentPlan(switch_to=a.role if state.kind is not a.role else None,
                              epoch=a.epoch, approved=approved, lease_ms=a.lease_ms)
    if a.epoch <= node_epoch:
        return AssignmentPlan(refusal=f"assigned master in epoch {a.epoch}, not after this "
                                      f"node's epoch {node_epoch}: waiting for a new epoch")
    return AssignmentPlan(switch_to=a.role, epoch=a.epoch, approved=approved,
                          lease_ms=a.lease_ms)
