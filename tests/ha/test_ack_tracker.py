"""AckTracker: in-sync membership, confirm offset and replication waits, on a manual clock."""
from __future__ import annotations

import threading

import pytest

from ha.ack_tracker import AckTracker, SlaveAckState
from common.clock import ManualClock
from common.completion import Completion
from common.config_values import ConfigError
from store.put_result import PutStatus

MAX_GAP = 1000
CATCHUP_MS = 15_000


def tracker(clock: ManualClock | None = None, *, in_sync_replicas: int = 2,
            min_in_sync_replicas: int = 1, all_ack: bool = False) -> AckTracker:
    return AckTracker(clock or ManualClock(), max_gap=MAX_GAP, max_catchup_ms=CATCHUP_MS,
                      in_sync_replicas=in_sync_replicas,
                      min_in_sync_replicas=min_in_sync_replicas, all_ack=all_ack)


def join(t: AckTracker, slave_id: str, offset: int) -> None:
    """Connect a slave and bring it in sync at `offset` (= the master max)."""
    t.connect(slave_id, offset)
    t.on_transfer(slave_id, offset)
    t.on_ack(slave_id, offset, offset, offset)
    assert slave_id in t.in_sync_ids()


# -- membership -------------------------------------------------------------------------------
def test_slave_joins_once_caught_up():
    t = tracker()
    t.connect("s1", 0)
    assert t.in_sync_count() == 0
    t.on_transfer("s1", 500)
    t.on_ack("s1", 300, 300, 500)
    assert t.in_sync_ids() == frozenset()  # behind the confirm offset (master max, set empty)
    t.on_ack("s1", 500, 400, 500)
    assert t.in_sync_ids() == frozenset({"s1"})


def test_slave_behind_does_not_join():
    clock = ManualClock()
    t = tracker(clock)
    join(t, "s1", 100)
    t.connect("s2", 0)
    t.on_transfer("s2", 100)
    t.on_ack("s2", 50, 50, 100)  # not caught up, and below the confirm offset 100
    assert t.in_sync_ids() == frozenset({"s1"})
    # caught up with the last transfer, but the master moved on by more than max_gap
    t.on_ack("s2", 100, 100, 100 + MAX_GAP + 1)
    assert "s2" not in t.in_sync_ids()
    t.on_ack("s2", 200, 200, 100 + MAX_GAP)
    assert "s2" in t.in_sync_ids()


def test_caught_up_at_last_transfer_counts_from_the_transfer_time():
    clock = ManualClock()
    t = tracker(clock)
    t.connect("s1", 0)
    t.on_transfer("s1", 1000)
    clock.advance(CATCHUP_MS / 1000 + 1)
    t.on_ack("s1", 1000, 1000, 1500)  # caught up with a transfer that is too old
    assert t.in_sync_count() == 0
    t.on_transfer("s1", 1500)
    t.on_ack("s1", 1500, 1500, 1600)
    # joining also needs ack >= confirm offset, which is the master max with an empty set
    assert t.in_sync_count() == 0
    t.on_ack("s1", 1600, 1600, 1600)
    assert t.in_sync_count() == 1


def test_slave_leaves_on_gap():
    t = tracker()
    join(t, "s1", 100)
    t.refresh(100 + MAX_GAP)
    assert t.in_sync_count() == 1
    t.refresh(100 + MAX_GAP + 1)
    assert t.in_sync_count() == 0


def test_slave_leaves_when_not_caught_up_in_time():
    clock = ManualClock()
    t = tracker(clock)
    join(t, "s1", 100)
    t.on_transfer("s1", 200)
    t.on_ack("s1", 150, 150, 200)  # acking, within max_gap, but never catching up
    clock.advance(CATCHUP_MS / 1000)
    t.refresh(200)
    assert t.in_sync_count() == 1
    clock.advance(0.001)
    t.refresh(200)
    assert t.in_sync_count() == 0


def test_disconnect_and_reconnect_drop_from_the_set():
    t = tracker()
    join(t, "s1", 100)
    join(t, "s2", 100)
    t.disconnect("s1")
    assert t.in_sync_ids() == frozenset({"s2"}) and t.ack_offset("s1") is None
    t.connect("s2", 100)  # a new session starts out of sync
    assert t.in_sync_count() == 0
    t.on_ack("ghost", 100, 100, 100)  # unknown slaves are ignored
    t.on_transfer("ghost", 100)
    assert t.ack_offset("ghost") is None


def test_enough_in_sync_counts_the_master():
    for needed, slaves, expected in [(2, 0, False), (2, 1, True), (3, 1, False), (3, 2, True)]:
        t = tracker(min_in_sync_replicas=needed)
        for i in range(slaves):
            join(t, f"s{i}", 100)
        assert t.enough_in_sync() is expected


def test_required_acks():
    t = tracker(in_sync_replicas=1)
    assert t.required_acks() == 1  # unlike RocketMQ, always wait for one slave
    assert tracker(in_sync_replicas=3).required_acks() == 2
    t = tracker(all_ack=True)
    assert t.required_acks() == 1
    join(t, "a", 0)
    join(t, "b", 0)
    assert t.required_acks() == 2


def test_bad_settings_are_rejected():
    with pytest.raises(ConfigError):
        tracker(in_sync_replicas=0)


# -- confirm offset ---------------------------------------------------------------------------
def test_confirm_offset_is_min_of_in_sync_acks():
    t = tracker()
    assert t.confirm_offset(500) == 500  # nobody in sync: the master max
    join(t, "a", 500)
    join(t, "b", 500)
    t.on_ack("a", 700, 700, 800)
    t.on_ack("b", 600, 600, 800)
    assert t.confirm_offset(800) == 600
    t.on_ack("b", 900, 900, 900)
    assert t.confirm_offset(900) == 700


def test_confirm_offset_never_decreases():
    t = tracker()
    assert t.confirm_offset(1000) == 1000
    t.connect("s1", 1000)
    t.on_ack("s1", 1000, 1000, 1000)
    assert t.in_sync_count() == 1
    assert t.confirm_offset(2000) == 1000
    t.disconnect("s1")
    assert t.confirm_offset(2000) == 2000
    assert t.confirm_offset(1500) == 2000  # a stale master max does not move it back


# -- waits ------------------------------------------------------------------------------------
def test_wait_released_by_one_ack_by_default():
    t = tracker()
    join(t, "a", 100)
    join(t, "b", 100)
    assert t.wait(100, 1000).value is PutStatus.PUT_OK  # already acked
    c = t.wait(200, 1000)
    assert not c.done
    t.on_ack("a", 200, 200, 200)
    assert c.value is PutStatus.PUT_OK


def test_wait_with_all_ack_needs_every_in_sync_slave():
    t = tracker(all_ack=True)
    c0 = t.wait(0, 1000)
    assert not c0.done  # an empty set never satisfies all_ack
    join(t, "a", 100)
    join(t, "b", 100)
    assert c0.value is PutStatus.PUT_OK
    c = t.wait(200, 1000)
    t.on_ack("a", 200, 200, 200)
    assert not c.done
    t.on_ack("b", 200, 200, 200)
    assert c.value is PutStatus.PUT_OK


def test_all_ack_wait_released_when_the_laggard_leaves():
    t = tracker(all_ack=True)
    join(t, "a", 100)
    join(t, "b", 100)
    c = t.wait(200, 1000)
    t.on_ack("a", 200, 200, 200)
    t.disconnect("b")
    assert c.value is PutStatus.PUT_OK


def test_wait_needs_two_slaves_with_three_replicas():
    t = tracker(in_sync_replicas=3)
    join(t, "a", 100)
    c = t.wait(100, 1000)
    assert not c.done  # only one slave in sync
    join(t, "b", 100)
    assert c.value is PutStatus.PUT_OK
    c = t.wait(200, 1000)
    t.on_ack("a", 200, 200, 200)
    assert not c.done
    t.on_ack("b", 250, 250, 250)
    assert c.value is PutStatus.PUT_OK


def test_wait_times_out_only_after_its_deadline():
    clock = ManualClock()
    t = tracker(clock)
    join(t, "a", 100)
    c = t.wait(200, 3000)
    clock.advance(2.999)
    assert t.expire() == 0 and not c.done
    t.refresh(200)
    assert not c.done
    clock.advance(0.002)
    t.refresh(200)
    assert c.value is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert t.expire() == 0  # removed
    c2 = t.wait(300, 1000)
    clock.advance(1.5)
    assert t.expire() == 1 and c2.value is PutStatus.FLUSH_SLAVE_TIMEOUT


def test_an_ack_before_refresh_beats_the_deadline():
    clock = ManualClock()
    t = tracker(clock)
    join(t, "a", 100)
    c = t.wait(200, 1000)
    clock.advance(2)
    t.on_ack("a", 200, 200, 200)
    assert c.value is PutStatus.PUT_OK


def test_fail_all():
    t = tracker()
    waits = [t.wait(100 * i, 1000) for i in range(1, 4)]
    t.fail_all(PutStatus.SERVICE_NOT_AVAILABLE)
    assert all(c.value is PutStatus.SERVICE_NOT_AVAILABLE for c in waits)
    assert t.expire() == 0


def test_callbacks_run_outside_the_lock():
    clock = ManualClock()
    t = tracker(clock)
    join(t, "a", 100)
    seen: list[object] = []
    ok = t.wait(200, 1000)
    ok.add_callback(lambda status: seen.append((status, t.in_sync_count(), t.wait(0, 1).value)))
    late = t.wait(300, 1000)
    late.add_callback(lambda status: seen.append((status, t.states(300)[0].ack_offset)))
    failed = t.wait(400, 1000)
    failed.add_callback(lambda status: seen.append((status, t.confirm_offset(400))))

    def drive() -> None:
        t.on_ack("a", 200, 200, 200)
        clock.advance(2)
        t.refresh(300)
        t.fail_all(PutStatus.SERVICE_NOT_AVAILABLE)

    worker = threading.Thread(target=drive, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "deadlock: a completion callback ran under the tracker lock"
    assert seen[0] == (PutStatus.PUT_OK, 1, PutStatus.PUT_OK)
    assert {s for s, *_ in seen[1:]} == {PutStatus.FLUSH_SLAVE_TIMEOUT}


def test_states():
    clock = ManualClock()
    t = tracker(clock)
    t.connect("b", 0)
    join(t, "a", 100)
    clock.advance(1.5)
    assert t.states(100) == [
        SlaveAckState("a", 100, 100, True, 1500, 1500, in_sync_changes=1,
                      last_change="joined: caught up", last_cause="caught_up",
                      last_change_age_ms=1500),
        SlaveAckState("b", 0, 0, False, 1500, -1),
    ]


def test_concurrent_waiters_and_one_acker():
    t = tracker()
    join(t, "a", 0)
    n_threads, per_thread = 4, 50
    results: list[PutStatus | None] = []
    results_lock = threading.Lock()
    start = threading.Barrier(n_threads + 1)

    def put(k: int) -> None:
        start.wait()
        mine = []
        for i in range(per_thread):
            c: Completion[PutStatus] = t.wait((i * n_threads + k + 1) * 10, 60_000)
            mine.append(c.wait(10))
        with results_lock:
            results.extend(mine)

    def ack() -> None:
        start.wait()
        for offset in range(10, (n_threads * per_thread + 1) * 10, 10):
            t.on_ack("a", offset, offset, offset)

    threads = [threading.Thread(target=put, args=(k,)) for k in range(n_threads)]
    threads.append(threading.Thread(target=ack))
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not any(th.is_alive() for th in threads)
    assert results == [PutStatus.PUT_OK] * (n_threads * per_thread)
    assert t.confirm_offset(n_threads * per_thread * 10) == n_threads * per_thread * 10


# -- under a controller: the approved sync state set ------------------------------------------
def test_approved_members_are_waited_for_until_the_controller_drops_them():
    t = tracker()  # in_sync_replicas=2 alone would wait for one slave only
    join(t, "a", 100)
    join(t, "b", 100)
    t.set_approved(frozenset({"a", "b"}))
    c = t.wait(200, 1000)
    t.on_ack("a", 200, 200, 200)
    assert not c.done  # every member, not just one
    t.disconnect("b")  # b left locally, but the controller still lists it
    assert not c.done and t.member_ids() == {"a", "b"}
    assert t.confirm_offset(300) == 100  # a reader never passes what b may lack
    t.set_approved(frozenset({"a"}))  # the controller dropped b
    assert c.value is PutStatus.PUT_OK and t.confirm_offset(300) == 200


def test_a_slave_that_joins_is_a_member_before_the_controller_knows():
    t = tracker()
    t.set_approved(frozenset())
    join(t, "a", 100)
    assert t.member_ids() == {"a"}
    c = t.wait(150, 1000)
    assert not c.done
    t.on_ack("a", 150, 150, 150)
    assert c.value is PutStatus.PUT_OK


def test_an_approved_member_never_connected_blocks_puts_and_the_confirm_offset():
    t = tracker()
    join(t, "a", 100)
    t.set_approved(frozenset({"a", "ghost"}))
    assert not t.wait(100, 1000).done
    assert t.confirm_offset(100) == 100  # never lowered: it only stops moving
    t.on_ack("a", 150, 150, 150)
    assert t.confirm_offset(150) == 100
