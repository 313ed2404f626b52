"""The controller's election rules in memory: heartbeats and ticks with explicit times."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from cluster.controller.election import (Assignment, ElectionConfig, GroupElection, GroupRecord,
                                         NodeReport, SwitchRefused)
from store.broker_role import BrokerRole

CONFIG = ElectionConfig(failover_timeout_ms=3000, lease_ms=2000, settle_ms=3000)
M, S1, S2 = "g:0", "g:1", "g:2"
ADDR = {M: "127.0.0.1:1", S1: "127.0.0.1:2", S2: "127.0.0.1:3"}


def report(node: str, role: str = "TRANSITIONING", epoch: int = 0, offset: int = 0, **kw):
    return NodeReport(node_id=node, address=ADDR[node], role=role, epoch=epoch,
                      max_offset=offset, **kw)


class Group:
    def __init__(self, record: GroupRecord | None = None, config: ElectionConfig = CONFIG):
        self.now = 100.0
        self.g = GroupElection(record or GroupRecord("g"), config, self.now)

    def hb(self, node: str, **kw) -> Assignment:
        return self.g.heartbeat(report(node, **kw), self.now, int(self.now * 1000))

    def advance(self, seconds: float, step: float = 0.1) -> None:
        """Move time on, ticking every `step` seconds as the controller's ticker does."""
        end = self.now + seconds
        while self.now < end:
            self.now = min(end, self.now + step)
            self.g.tick(self.now, int(self.now * 1000))

    def running(self) -> "Group":
        """A group with M master in epoch 1 and both slaves in the sync state set."""
        assert self.hb(M, preferred_role="SYNC_MASTER").role is BrokerRole.SYNC_MASTER
        self.hb(M, role="SYNC_MASTER", epoch=1, offset=100, in_sync=frozenset({S1, S2}))
        self.hb(S1, role="SLAVE", epoch=1, offset=100)
        self.hb(S2, role="SLAVE", epoch=1, offset=90)
        assert self.g.record.sync_state_set == {M, S1, S2}
        return self


def test_a_fresh_group_of_empty_stores_elects_its_configured_master_at_once():
    grp = Group()
    a = grp.hb(M, preferred_role="ASYNC_MASTER")
    assert a.role is BrokerRole.ASYNC_MASTER and a.epoch == 1 and a.lease_ms == 2000
    assert grp.g.record.master_role is BrokerRole.ASYNC_MASTER and grp.g.dirty
    s = grp.hb(S1, preferred_role="SLAVE")
    assert s.role is BrokerRole.SLAVE and s.master_address == ADDR[M] and s.master_id == M


def test_a_fresh_group_with_data_waits_then_elects_the_most_complete_node():
    grp = Group()
    assert grp.hb(M, epoch=3, offset=500, preferred_role="SYNC_MASTER").role is None
    assert "waiting" in grp.hb(S1, epoch=4, offset=200).note
    grp.advance(1.6)
    grp.hb(M, epoch=3, offset=500, preferred_role="SYNC_MASTER")
    grp.hb(S1, epoch=4, offset=200)
    assert grp.g.record.master_id == ""
    grp.advance(1.6)  # the settle window is over
    assert grp.g.record.master_id == S1 and grp.g.record.epoch == 5  # above every node's epoch


def test_the_sync_state_set_follows_the_masters_report_in_its_term_only():
    grp = Group().running()
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1}))
    assert grp.g.record.sync_state_set == {M, S1}
    before = grp.g.record.sync_state_epoch
    grp.hb(S1, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S2}))  # not the master
    grp.hb(M, role="SLAVE", epoch=0, in_sync=frozenset())  # not in its term
    assert grp.g.record.sync_state_set == {M, S1} and grp.g.record.sync_state_epoch == before


SLOW = "left: slow: acks take 250 ms (fastest member g:2: 3.0 ms), 83x slower"


def test_each_change_of_the_set_is_announced_once_with_the_masters_reason():
    grp = Group().running()
    grp.g.announcements.clear()
    for _ in range(3):  # every heartbeat repeats the report: one change, one line
        grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S2}),
               member_notes={S1: SLOW, S2: "joined: caught up"}, min_in_sync_replicas=1)
    assert grp.g.record.sync_state_set == {M, S2}
    assert grp.g.announcements == [
        f"sync state set ['g:0', 'g:1', 'g:2'] -> ['g:0', 'g:2']: removed g:1 ({SLOW})"]
    back = "joined: fast again for 5 s (acks take 3 ms; was out: ...)"
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1, S2}),
           member_notes={S1: back}, min_in_sync_replicas=1)
    changes = grp.g.record.sync_state_changes
    assert [(c.node_id, c.added, c.reason) for c in changes[:2]] == [(S1, True, back),
                                                                      (S1, False, SLOW)]
    assert changes[0].sync_state_epoch == grp.g.record.sync_state_epoch
    assert GroupRecord.from_json(grp.g.record.to_json()) == grp.g.record


def test_a_sync_master_set_is_not_shrunk_below_min_in_sync_replicas():
    """minInSyncReplicas = the group's size: the slow member stays electable (the master
    refuses writes meanwhile, so it misses none), and the note names it once."""
    grp = Group().running()
    grp.g.announcements.clear()
    before = grp.g.record.sync_state_epoch
    for _ in range(3):
        grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S2}),
               member_notes={S1: SLOW}, min_in_sync_replicas=3)
    assert grp.g.record.sync_state_set == {M, S1, S2}
    assert grp.g.record.sync_state_epoch == before
    assert len(grp.g.announcements) == 1
    assert grp.g.announcements[0].startswith(
        "keeps g:1 in the sync state set: without it 2 < minInSyncReplicas=3, so the master "
        "refuses writes (g:1 left: slow: acks take 250 ms")
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1, S2}), min_in_sync_replicas=3)
    assert grp.g.kept_note == ""
    # An ASYNC_MASTER acknowledges alone: its set follows the report whatever the minimum.
    grp.hb(M, role="ASYNC_MASTER", epoch=1, in_sync=frozenset({S2}), min_in_sync_replicas=3)
    assert grp.g.record.sync_state_set == {M, S2}


def test_a_master_out_of_its_term_cannot_widen_the_set():
    """A master that reported SLAVE in its own epoch has left it: a late SYNC_MASTER report of
    that epoch must not add a slave that could then win the election without the writes."""
    grp = Group().running()
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset())  # the slaves fell behind
    assert grp.g.record.sync_state_set == {M}
    # Demoted by hand, out of its term, and unhealthy, so it is not elected again at once.
    grp.hb(M, role="SLAVE", epoch=1, healthy=False, unhealthy_reason="disk full")
    assert grp.g.record.epoch == 1
    grp.hb(M, role="SYNC_MASTER", epoch=1, healthy=False, in_sync=frozenset({S1}))  # late
    assert grp.g.record.sync_state_set == {M}
    grp.hb(S1, role="SLAVE", epoch=1, offset=100)
    assert grp.g.record.master_id == M  # only the one member of the set may be elected


def test_a_silent_master_is_replaced_by_the_most_complete_member_of_the_set():
    grp = Group().running()
    for _ in range(6):  # the slaves keep reporting, the master is silent
        grp.advance(0.5)
        grp.hb(S1, role="SLAVE", epoch=1, offset=100)
        grp.hb(S2, role="SLAVE", epoch=1, offset=90)
    rec = grp.g.record
    assert rec.master_id == S1 and rec.epoch == 2 and rec.sync_state_set == {S1}
    assert "no heartbeat from master g:0" in rec.elections[0].reason
    assert grp.hb(S2, role="SLAVE", epoch=1).master_address == ADDR[S1]


def test_only_members_of_the_set_are_elected_and_none_means_no_master():
    grp = Group().running()
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1}))  # S2 left the set
    for _ in range(7):
        grp.advance(0.5)
        grp.hb(S2, role="SLAVE", epoch=1, offset=100)  # S1 is gone too
    rec = grp.g.record
    assert rec.master_id == M and rec.epoch == 1  # nobody elected
    a = grp.hb(S2, role="SLAVE", epoch=1)
    assert "refuses writes" in a.note and "g:0, g:1" in a.note
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1}))  # the master comes back
    grp.advance(0.1)
    assert grp.hb(M, role="SYNC_MASTER", epoch=1).role is BrokerRole.SYNC_MASTER
    assert grp.g.note == "" and rec.epoch == 1


def test_unclean_election_takes_any_alive_node():
    cfg = ElectionConfig(failover_timeout_ms=3000, lease_ms=2000, settle_ms=3000, unclean=True)
    grp = Group(config=cfg).running()
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset())
    for _ in range(7):
        grp.advance(0.5)
        grp.hb(S2, role="SLAVE", epoch=1, offset=80)
    assert grp.g.record.master_id == S2


def test_an_unhealthy_master_is_replaced_after_the_timeout():
    grp = Group().running()
    for _ in range(7):
        grp.advance(0.5)
        grp.hb(M, role="SYNC_MASTER", epoch=1, healthy=False, unhealthy_reason="DISK_ERROR: EIO",
               in_sync=frozenset({S1, S2}))
        grp.hb(S1, role="SLAVE", epoch=1, offset=100)
        grp.hb(S2, role="SLAVE", epoch=1, offset=100)
    rec = grp.g.record
    assert rec.master_id in (S1, S2) and "unhealthy" in rec.elections[0].reason
    assert grp.hb(M, role="SYNC_MASTER", epoch=1).role is BrokerRole.SLAVE


def test_a_restarted_master_rejoins_the_election_with_a_new_epoch():
    grp = Group().running()
    a = grp.hb(M, role="TRANSITIONING", epoch=1, offset=120)  # restarted: cannot reuse epoch 1
    assert a.role is BrokerRole.SYNC_MASTER and a.epoch == 2  # the most complete, again
    assert "out of its term" in grp.g.record.elections[0].reason
    assert grp.hb(S1, role="SLAVE", epoch=1, offset=100).master_address == ADDR[M]


def test_a_restarted_master_with_less_data_gives_way():
    grp = Group().running()
    grp.hb(M, role="TRANSITIONING", epoch=1, offset=40)  # lost its unflushed tail
    assert grp.g.record.master_id == S1 and grp.g.record.epoch == 2


def test_a_restarted_controller_waits_for_the_set_before_electing():
    rec = GroupRecord("g", epoch=4, master_id=M, sync_state_set=frozenset({M, S1, S2}),
                      master_role=BrokerRole.SYNC_MASTER, addresses=dict(ADDR))
    grp = Group(rec)
    grp.advance(2.0)
    assert grp.hb(S1, role="SLAVE", epoch=4, offset=10).role is BrokerRole.SLAVE  # M alive yet
    grp.advance(1.5)  # M never reported: lost; S2 has not reported either, settle is over
    assert rec.master_id == S1 and rec.epoch == 5


def test_a_stalled_controller_does_not_blame_the_nodes():
    """Paused longer than the failover timeout, the controller wakes to old heartbeats from
    everyone: the slave's may arrive first, but the master is not failed over for the pause."""
    grp = Group().running()
    grp.advance(5.0, step=5.0)  # one tick after a 5 s stall
    grp.hb(S1, role="SLAVE", epoch=1, offset=100)
    assert grp.g.record.master_id == M and grp.g.record.epoch == 1
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1, S2}))
    grp.advance(1.0)
    assert grp.g.record.epoch == 1


def test_planned_switch():
    grp = Group().running()
    with pytest.raises(SwitchRefused, match="master already"):
        grp.g.switch_master(M, grp.now, 0)
    grp.hb(M, role="SYNC_MASTER", epoch=1, in_sync=frozenset({S1}))
    with pytest.raises(SwitchRefused, match="not in the sync state set"):
        grp.g.switch_master(S2, grp.now, 0)
    grp.hb(S1, role="SLAVE", epoch=1, healthy=False, unhealthy_reason="disk full")
    with pytest.raises(SwitchRefused, match="unhealthy"):
        grp.g.switch_master(S1, grp.now, 0)
    grp.hb(S1, role="SLAVE", epoch=1)
    grp.g.switch_master(S1, grp.now, 0)
    assert grp.g.record.master_id == S1 and grp.g.record.epoch == 2
    assert grp.hb(M, role="SYNC_MASTER", epoch=1).role is BrokerRole.SLAVE


def test_the_record_survives_json():
    grp = Group().running()
    rec = grp.g.record
    assert GroupRecord.from_json(rec.to_json()) == rec


def test_the_lease_is_shorter_than_the_failover_timeout():
    with pytest.raises(ValueError, match="lease"):
        ElectionConfig(failover_timeout_ms=2000, lease_ms=2000)


NODES = (M, S1, S2)
EVENTS = st.lists(st.one_of(
    st.tuples(st.just("hb"), st.sampled_from(NODES), st.booleans(), st.integers(0, 3),
              st.integers(0, 300), st.booleans(), st.frozensets(st.sampled_from(NODES))),
    st.tuples(st.just("tick"), st.floats(0.05, 4.0)),
    st.tuples(st.just("switch"), st.sampled_from(NODES))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_elections_only_raise_epochs_and_pick_members_of_the_set(events):
    grp = Group()
    last_epoch = 0
    for event in events:
        before_set = grp.g.record.sync_state_set
        before_master = grp.g.record.master_id
        elections = len(grp.g.record.elections)
        if event[0] == "hb":
            _, node, as_master, epoch_delta, offset, healthy, in_sync = event
            rec = grp.g.record
            role = rec.master_role.value if as_master and node == rec.master_id else "SLAVE"
            epoch = max(0, rec.epoch - epoch_delta) if role == "SLAVE" else rec.epoch
            if role != "SLAVE" and not grp.g.master_may_run:
                # A master in its term vouches for the slaves it reports in sync: they may
                # win an election in this same step (it was unhealthy for too long).
                before_set = before_set | in_sync
            grp.hb(node, role=role, epoch=epoch, offset=offset, healthy=healthy,
                   in_sync=in_sync - {node}, preferred_role="SYNC_MASTER")
        elif event[0] == "tick":
            grp.advance(event[1])
        else:
            try:
                grp.g.switch_master(event[1], grp.now, 0)
            except SwitchRefused:
                assert grp.g.record.master_id == before_master
        rec = grp.g.record
        assert rec.epoch >= last_epoch
        if len(rec.elections) > elections:  # an election happened in this step
            assert rec.epoch > last_epoch and rec.elections[0].epoch == rec.epoch
            assert rec.sync_state_set == {rec.master_id}
            if before_set:  # not a fresh group: the winner holds every acknowledged write
                assert rec.master_id in before_set
        last_epoch = rec.epoch
        assert rec.master_id == "" or rec.master_id in rec.sync_state_set
