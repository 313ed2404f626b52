"""The Role of a node, in memory (no node): which state it is in, what it tells operators, and
the one rule for calls that need the master (require_master, route)."""
from __future__ import annotations

import pytest

from cluster.config.node_role import Follower, Forward, Leader, NotMaster, Role, Transitioning
from store.broker_role import BrokerRole

MASTER = object()  # stands in for the MasterRole a Leader carries
MASTER_ADDRESS = "10.0.0.1:10911"


def test_a_new_role_is_transitioning_and_needs_the_master_elsewhere():
    role = Role("broker-a:0")
    assert role.state == Transitioning("starting")
    assert (role.kind, role.name, role.master, role.followed_address) == \
        (None, "TRANSITIONING", None, "")
    with pytest.raises(NotMaster) as e:
        role.require_master()
    assert e.value.reason == "broker-a:0 is changing role (starting); retry in a moment"
    assert e.value.master_address == "" and str(e.value) == e.value.reason
    for forwarded in (False, True):  # nowhere to forward to
        with pytest.raises(NotMaster) as e:
            role.route(forwarded=forwarded)
        assert "changing role (starting)" in e.value.reason and e.value.master_address == ""


@pytest.mark.parametrize("kind", [BrokerRole.ASYNC_MASTER, BrokerRole.SYNC_MASTER])
def test_a_leader_answers_itself(kind):
    role = Role("broker-a:0", Leader(kind, 4, MASTER))
    assert (role.kind, role.name, role.master, role.followed_address) == \
        (kind, kind.value, MASTER, "")
    assert role.require_master() is MASTER
    assert role.route(forwarded=False) is MASTER
    assert role.route(forwarded=True) is MASTER  # a forwarded call reached the master
    assert role.not_master_reason() == "broker-a:0 is the master"


def test_a_follower_forwards_once_and_names_its_master():
    role = Role("broker-a:1", Follower(MASTER_ADDRESS))
    assert (role.kind, role.name, role.master, role.followed_address) == \
        (BrokerRole.SLAVE, "SLAVE", None, MASTER_ADDRESS)
    assert role.route(forwarded=False) == Forward(MASTER_ADDRESS)
    with pytest.raises(NotMaster) as e:
        role.route(forwarded=True)  # two nodes that each think the other leads: no ping-pong
    assert e.value.master_address == MASTER_ADDRESS
    assert e.value.reason.startswith(f"broker-a:1 is a slave of {MASTER_ADDRESS}, not the master")
    assert "never forwarded again" in e.value.reason
    with pytest.raises(NotMaster) as e:
        role.require_master()
    assert (e.value.reason, e.value.master_address) == \
        (f"broker-a:1 is a slave of {MASTER_ADDRESS}", MASTER_ADDRESS)


def test_set_switches_what_every_question_answers():
    role = Role("broker-a:1", Follower(MASTER_ADDRESS))
    promoted = Leader(BrokerRole.ASYNC_MASTER, 2, MASTER)
    role.set(promoted)
    assert role.state is promoted and role.require_master() is MASTER
    assert role.route(forwarded=True) is MASTER and role.followed_address == ""
    role.set(Transitioning("node shutting down"))
    assert role.master is None and role.name == "TRANSITIONING"
    with pytest.raises(NotMaster, match="node shutting down"):
        role.route(forwarded=False)
