"""The drill checker on hand-built Histories (no cluster): each rule on a run that breaks it and
on one that does not, the rendering of results, and a property test of lost/phantom against a
direct reading of the same history."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.drills.checker import AFTER_ACK, NOT_ACKED, STORED_TWICE, Expectation, check
from cluster.drills.history import Ack, History, SendOutcome
from cluster.drills.report import render_detail, render_table, summary_row

from tests.drills.builders import (EXPECT, FAILED, GROUP, OK, TOPIC, UNKNOWN, clean_history,
                                   fifo_history, receive, send)


def test_clean_run_passes() -> None:
    r = check(clean_history(), EXPECT)
    assert r.passed and r.failures == ()
    assert (r.sends_ok, r.sends_failed, r.sends_unknown, r.received) == (3, 0, 0, 3)
    assert r.lost == () and r.phantom == () and dict(r.duplicates) == {}
    assert r.recovery_s == () and r.longest_outage_s == 0.0


def test_lost_acked_message_fails_and_is_named() -> None:
    h = clean_history()
    send(h, "gone", started=5)
    r = check(h, EXPECT)
    assert r.lost == ((GROUP, "gone"),)
    assert not r.passed
    assert any("1 acknowledged messages never consumed" in f and "gone" in f for f in r.failures)


def test_lost_is_per_group_and_topic() -> None:
    # g2 consumes another topic: the t messages are not owed to it; g3 never received anything.
    h = clean_history(2)
    expect = Expectation(groups=(GROUP, "g3"),
                         topics_of_group={GROUP: TOPIC, "g3": TOPIC, "g2": "u"})
    r = check(h, expect)
    assert r.lost == (("g3", "k0"), ("g3", "k1"))


def test_unknown_and_failed_not_received_are_not_lost() -> None:
    h = clean_history()
    send(h, "u", UNKNOWN)
    send(h, "f", FAILED)
    r = check(h, EXPECT)
    assert r.passed and r.lost == ()
    assert (r.unknown_delivered, r.unknown_never_delivered) == (0, 1)


def test_received_failed_send_is_phantom() -> None:
    h = clean_history()
    send(h, "f", FAILED, detail="first")
    send(h, "f", FAILED, started=1, detail="SYSTEM_BUSY")
    receive(h, "f")
    r = check(h, EXPECT)
    assert r.phantom == ((GROUP, "f", "send failed: SYSTEM_BUSY"),)
    assert any(f.startswith("1 phantom reads") for f in r.failures)


def test_failed_then_ok_resend_is_not_phantom() -> None:
    h = clean_history()
    send(h, "f", FAILED)
    send(h, "f", OK, started=1)
    receive(h, "f")
    assert check(h, EXPECT).passed


def test_never_sent_key_is_phantom() -> None:
    h = clean_history()
    receive(h, "ghost")
    receive(h, "ghost", at=2)    # one entry per (group, key), however often received
    r = check(h, EXPECT)
    assert r.phantom == ((GROUP, "ghost", "never sent"),)
    assert not r.passed


def test_foreign_body_is_phantom() -> None:
    h = clean_history()
    receive(h, None, message_id="m-foreign")
    r = check(h, EXPECT)
    assert r.phantom == ((GROUP, "m-foreign", "not a drill message"),)
    assert not r.passed and r.received == 3


def test_unknown_delivered_is_not_phantom_and_counted() -> None:
    h = clean_history()
    send(h, "u1", UNKNOWN)
    send(h, "u2", UNKNOWN)
    receive(h, "u1")
    r = check(h, EXPECT)
    assert r.passed and r.phantom == ()
    assert (r.sends_unknown, r.unknown_delivered, r.unknown_never_delivered) == (2, 1, 1)


@pytest.mark.parametrize("ack_at, second_id, why", [
    (None, "id-k0", NOT_ACKED),          # never acked: the invisible time ran out
    (2.0, "id-k0", NOT_ACKED),           # acked, but only after the redelivery
    (0.7, "id-k0", AFTER_ACK),           # acked before the redelivery
    (0.7, "id-other", STORED_TWICE),     # another message id wins over the ack
])
def test_duplicate_classification(ack_at: float | None, second_id: str, why: str) -> None:
    h = clean_history(1)                 # k0 first delivered at 0.5
    if ack_at is not None:
        h.record_ack(Ack("k0", GROUP, "id-k0", True, ack_at))
    h.record_ack(Ack("k0", GROUP, "id-k0", False, 0.6, "failed ack does not count"))
    receive(h, "k0", at=1.0, message_id=second_id, attempt=2)
    r = check(h, EXPECT)
    assert dict(r.duplicates) == {why: 1}
    assert r.received == 1
    # redeliveries are legal (at-least-once); a message stored twice is not
    assert r.passed is (why != STORED_TWICE)


def test_a_retry_stored_again_under_the_same_message_id_is_a_stored_duplicate() -> None:
    # The official clients keep the message id over their retries: a second record of one
    # message has the same id at another queue offset, and is not a redelivery.
    h = clean_history(1)
    h.record_ack(Ack("k0", GROUP, "id-k0", True, 0.7))
    receive(h, "k0", at=1.0, offset=7)
    receive(h, "k0", at=1.1, group="late", offset=0)
    receive(h, "k0", at=1.2, group="late", offset=7)
    r = check(h, EXPECT)
    assert dict(r.duplicates) == {STORED_TWICE: 2}
    assert r.stored_duplicates == 1      # one extra record, whatever number of groups read it
    assert r.failures == ("1 duplicates stored: a message written twice (a retried send stored "
                          "again; duplicateWindowSeconds off or missed)",)


def test_redeliveries_are_not_stored_duplicates() -> None:
    h = clean_history(1)
    receive(h, "k0", at=1.0, attempt=2)
    r = check(h, EXPECT)
    assert dict(r.duplicates) == {NOT_ACKED: 1} and r.stored_duplicates == 0


def test_client_view_gap_per_client_and_fault() -> None:
    h = History()
    for i, t in enumerate((0.5, 0.9, 4.4, 4.6)):          # own client: acks around the fault
        send(h, f"o{i}", started=t - 0.01, finished=t)
    for i, t in enumerate((0.8, 6.0, 6.2)):               # official: 5.2 s without an ack
        send(h, f"x{i}", started=t - 0.01, finished=t, client="official")
    send(h, "x-failed", UNKNOWN, started=1.0, finished=4.0, client="official")
    fault = h.fault_started("kill -9 master", at=1.0)
    h.fault_healed(fault, at=4.0)
    later = h.fault_started("kill -9 master", at=10.0)    # nothing acknowledged after it
    h.fault_healed(later, at=13.0)
    h.record_ack(Ack("o0", "og", "id-o0", True, 0.95))     # official consumers: acks 0.95, 5.5
    h.record_ack(Ack("o1", "og", "id-o1", False, 4.9))     # a failed ack does not end a gap
    h.record_ack(Ack("o2", "og", "id-o2", True, 5.5))
    r = check(h, Expectation(consumer_views={"official consumers": "og"}))
    gaps, resumed = r.client_gaps, r.client_resumed
    assert set(gaps) == {"own", "official", "official consumers"}
    assert gaps["official consumers"][0] == pytest.approx(4.55)
    assert gaps["own"][0] == pytest.approx(3.5) and gaps["own"][1] is None
    assert gaps["official"][0] == pytest.approx(5.2) and gaps["official"][1] is None
    assert resumed["own"][0] == pytest.approx(0.4)          # 4.4: 0.4 s after the heal at 4.0
    assert resumed["official"][0] == pytest.approx(2.0)     # 6.0


def test_duplicates_order_by_time_not_by_record_order() -> None:
    h = History()
    send(h, "k")
    receive(h, "k", at=3.0, message_id="late")
    receive(h, "k", at=1.0, message_id="id-k")   # recorded later, delivered first
    h.record_ack(Ack("k", GROUP, "id-k", True, 2.0))
    receive(h, "k", at=4.0, message_id="id-k")
    assert dict(check(h, EXPECT).duplicates) == {STORED_TWICE: 1, AFTER_ACK: 1}


def test_fifo_order_violation_detected() -> None:
    r = check(fifo_history(), Expectation(groups=(GROUP,), topics_of_group={GROUP: TOPIC},
                                          fifo_groups=frozenset({GROUP})))
    assert r.order_violations == ("group g, message group B: seq 1 delivered after seq 2",)
    assert not r.passed and any("1 order violations" in f for f in r.failures)
    assert summary_row("fifo", r)["order"] == "1"


def test_order_not_checked_for_non_fifo_group() -> None:
    r = check(fifo_history(), EXPECT)
    assert r.order_violations == () and r.passed
    assert summary_row("plain", r)["order"] == "-"


def faulted_history(fault_at: float, healed: float | None,
                    ok_sends: list[tuple[float, float]]) -> History:
    """One fault; each OK send (started, finished) is received 0.1 s after it finished."""
    h = History()
    index = h.fault_started("kill -9 master", at=fault_at)
    if healed is not None:
        h.fault_healed(index, at=healed)
    for i, (started, finished) in enumerate(ok_sends):
        send(h, f"k{i}", started=started, finished=finished)
        receive(h, f"k{i}", at=finished + 0.1)
    return h


def test_recovery_per_fault_and_longest_outage() -> None:
    h = faulted_history(10.0, 11.0, [(1, 1.1), (9.9, 12.5), (10.5, 13.0), (11.0, 12.0)])
    h.fault_started("SIGSTOP master", at=20.0)
    send(h, "late", started=20.5, finished=21.0)
    receive(h, "late", at=22)
    r = check(h, EXPECT)
    # the first OK answer among sends STARTED at/after the fault: (11.0, 12.0), not (9.9, 12.5)
    # that started before it nor (10.5, 13.0) that started first but finished later
    assert r.recovery_s == pytest.approx((2.0, 1.0))
    # from the first fault's start: 10 -> 12.0 -> 12.5 -> 13.0 -> 21.0
    assert r.longest_outage_s == pytest.approx(8.0)
    assert r.passed
    assert summary_row("two", r)["recovery"] == "1.0/1.5/2.0 s"
    assert "recovery per fault: 2.00 s, 1.00 s" in render_detail("two", r)


def test_longest_outage_counts_from_the_fault_start() -> None:
    r = check(faulted_history(10.0, 11.0, [(1, 1.1), (10.2, 15.0), (15.0, 15.5)]), EXPECT)
    assert r.longest_outage_s == pytest.approx(5.0)
    assert summary_row("one", r)["recovery"] == "5.00 s"


def test_no_recovery_is_a_failure() -> None:
    h = faulted_history(10.0, None, [(1, 1.1), (9.0, 12.0)])
    send(h, "after", UNKNOWN, started=11)
    r = check(h, EXPECT)
    assert r.recovery_s == (None,)
    assert r.failures == ("no acknowledged write after kill -9 master",)
    assert summary_row("x", r)["recovery"] == "none"


def test_unavailable_rule_ok_before_healed_fails() -> None:
    h = faulted_history(10.0, 20.0, [(1, 1.1), (12, 13)])
    r = check(h, Expectation(recovers=False, groups=(GROUP,), topics_of_group={GROUP: TOPIC}))
    assert len(r.failures) == 1 and "acknowledged while it should be unavailable" in r.failures[0]
    assert "k1" in r.failures[0]


def test_unavailable_rule_ok_after_healed_passes() -> None:
    # (9, 10.5) started before the fault: the rule only covers sends started after it.
    h = faulted_history(10.0, 20.0, [(1, 1.1), (9, 10.5), (19, 21)])
    expect = Expectation(recovers=False, groups=(GROUP,), topics_of_group={GROUP: TOPIC})
    r = check(h, expect)
    assert r.passed
    assert summary_row("u", r, recovers=False)["recovery"] == "unavailable"
    # never healed and nothing acknowledged after the fault: no recovery, and that is fine
    assert check(faulted_history(10.0, None, [(1, 1.1)]), expect).passed

def test_rendering() -> None:
    h = clean_history()
    send(h, "gone")
    receive(h, "k0", at=9, attempt=2)
    r = check(h, EXPECT)
    row = summary_row("kill-master", r)
    assert list(row) == ["drill", "acked", "failed", "unknown", "lost", "phantom", "duplicates",
                         "order", "recovery", "verdict"]
    assert row["duplicates"] == "1 (redelivered 1)" and row["verdict"] == "FAIL"
    rows = [row, summary_row("clean", check(clean_history(), EXPECT))]
    text = render_table(rows).splitlines()
    assert len(text) == 4 and len({len(line) for line in text[:2]}) == 1
    md = render_table(rows, markdown=True).splitlines()
    assert md[0].startswith("| drill |") and md[1].startswith("|:---|") and "| PASS |" in md[3]
    detail = render_detail("kill-master", r)
    assert detail.startswith("kill-master: FAIL") and "g/gone" in detail


KEYS = [f"k{i}" for i in range(12)]


@settings(max_examples=200, deadline=None)
@given(outcomes=st.dictionaries(st.sampled_from(KEYS), st.lists(st.sampled_from(list(SendOutcome)),
                                                                  min_size=1, max_size=3)),
       delivered=st.dictionaries(st.sampled_from(KEYS), st.integers(1, 3)))
def test_lost_and_phantom_are_exact(outcomes: dict[str, list[SendOutcome]],
                                    delivered: dict[str, int]) -> None:
    h = History()
    for key, results in outcomes.items():
        for i, outcome in enumerate(results):
            send(h, key, outcome, started=i)
    for key, times in delivered.items():
        for i in range(times):
            receive(h, key, at=10 + i)
    r = check(h, EXPECT)
    ok = {k for k, rs in outcomes.items() if OK in rs}
    phantom = {k for k in delivered if k not in outcomes or all(o is FAILED for o in outcomes[k])}
    never_delivered = ok - delivered.keys()
    assert {k for _, k in r.lost} == never_delivered and len(r.lost) == len(never_delivered)
    assert {k for _, k, _ in r.phantom} == phantom and len(r.phantom) == len(phantom)
    assert r.passed == (not r.lost and not r.phantom)
    assert sum(r.duplicates.values()) == sum(delivered.values()) - len(delivered)

def test_expectation_needs_a_topic_per_group_and_is_read_only() -> None:
    with pytest.raises(ValueError, match="g2"):
        Expectation(groups=(GROUP, "g2"), topics_of_group={GROUP: TOPIC})
    topics = {GROUP: TOPIC}
    expect = Expectation(groups=(GROUP,), topics_of_group=topics)
    topics[GROUP] = "changed"
    assert expect.topics_of_group[GROUP] == TOPIC
    with pytest.raises(TypeError):
        expect.topics_of_group[GROUP] = "x"  # type: ignore[index]
