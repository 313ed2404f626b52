"""The checker's per-broker-group figures: which group stored, failed or moved each send, and the
failure when a group other than the faulted one saw a failed send."""
from __future__ import annotations

import os
import tempfile

import pytest

from cluster.drills.checker import UNATTRIBUTED, Expectation, GroupSends, check
from cluster.drills.history import History, Receive, Send, SendOutcome
from cluster.drills.report import render_groups

from tests.drills.builders import GROUP, TOPIC

OK, FAILED, UNKNOWN = SendOutcome.OK, SendOutcome.FAILED, SendOutcome.UNKNOWN
GROUPS = ("broker-a", "broker-b")
EXPECT = Expectation(groups=(GROUP,), topics_of_group={GROUP: TOPIC}, broker_groups=GROUPS,
                     fault_group="broker-a")


def _send(h: History, key: str, group: str, outcome: SendOutcome = OK, refused: str = "",
          client: str = "own") -> None:
    h.record_send(Send(key, TOPIC, None, 0, 0.0, 0.01, outcome, message_id=f"id-{key}",
                       client=client, group=group, refused_by=refused))
    if outcome is OK:
        h.record_receive(Receive(key, TOPIC, GROUP, 0, int(key[1:]), f"id-{key}", 1, 1.0,
                                 broker=group))


def test_per_group_counts_and_moves() -> None:
    h = History()
    _send(h, "k0", "broker-a")
    _send(h, "k1", "broker-b")
    _send(h, "k2", "broker-b", refused="broker-a")      # refused by a, stored by b
    _send(h, "k3", "broker-a", FAILED)
    _send(h, "k4", "broker-a", UNKNOWN)
    _send(h, "k5", "", UNKNOWN, client="official")       # the official client's failure
    r = check(h, EXPECT)
    assert r.per_group["broker-a"] == GroupSends(acked=1, failed=1, unknown=1, moved_away=1)
    assert r.per_group["broker-b"] == GroupSends(acked=2, moved_in=1)
    assert r.per_group[UNATTRIBUTED] == GroupSends(unknown=1)
    assert r.passed, r.failures
    text = render_groups("kill-master", r)
    assert "broker-a (fault)" in text and "not known" in text


def test_a_failed_send_in_the_other_group_fails_the_drill() -> None:
    h = History()
    _send(h, "k0", "broker-a")
    _send(h, "k1", "broker-b", FAILED)
    _send(h, "k2", "broker-a", refused="broker-b")
    r = check(h, EXPECT)
    assert any(f.startswith("group broker-b saw 2 failed sends during a fault in broker-a")
               for f in r.failures), r.failures


def test_a_copy_in_another_group_is_told_apart_from_a_stored_duplicate() -> None:
    """One key in both groups at the same queue id and offset: a copy in another group (a
    resend there), not a duplicate within a group; two offsets in one group are one."""
    h = History()
    h.record_send(Send("k0", TOPIC, None, 0, 0.0, 0.01, OK, message_id="id-k0",
                       group="broker-a"))
    for broker in GROUPS:
        h.record_receive(Receive("k0", TOPIC, GROUP, 0, 0, "id-k0", 1, 1.0, broker=broker))
    r = check(h, EXPECT)
    assert (r.stored_duplicates, r.copies_in_other_groups) == (0, 1) and r.passed
    h.record_receive(Receive("k0", TOPIC, GROUP, 0, 1, "id-k0", 1, 2.0, broker="broker-a"))
    r = check(h, EXPECT)
    assert (r.stored_duplicates, r.copies_in_other_groups) == (1, 1) and not r.passed


def test_group_fields_survive_save_and_load() -> None:
    h = History()
    _send(h, "k0", "broker-b", refused="broker-a")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "h.jsonl")
        h.save(path)
        loaded = History.load(path)
    assert loaded.sends()[0].refused_groups() == ("broker-a",)
    assert loaded.receives()[0].broker == "broker-b"


def test_fault_group_must_be_a_drilled_group() -> None:
    with pytest.raises(ValueError, match="broker-c"):
        Expectation(broker_groups=GROUPS, fault_group="broker-c")
