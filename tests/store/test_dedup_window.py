"""The duplicate window as a plain object (store/dedup/window.py): which records are client
sends, a repeat answered with its original's place, expiry by store time on a ManualClock, the
bound, reused ids refused, feeding from reput in commitlog order, cuts, and its cost a entry."""
from __future__ import annotations

import dataclasses
import gc
import itertools
import tracemalloc
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from common.clock import ManualClock
from store import codec
from store.codec import SysFlag
from store.codec.dispatch import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, DispatchRequest
from store.config import StoreConfig
from store.dedup import window as window_module
from store.dedup.window import DuplicateWindow, Original, sent_as
from store.errors import MessageIllegal
from store.put_result import AppendResult

T0 = 1_700_000_000_000
SIZE = 200


class Log:
    """A window and what a put path would hand it: records appended one after the other."""

    def __init__(self, seconds: int = 120, max_entries: int = 1000) -> None:
        self.clock = ManualClock(T0)
        self.config = StoreConfig(store_path_root_dir="/nonexistent",
                                  duplicate_window_seconds=seconds,
                                  duplicate_window_max_entries=max_entries)
        self.window = DuplicateWindow(lambda: self.config, self.clock)
        self.end = 0
        self.queue_offset = 0

    def put(self, *sent, dedup: bool = True, queue_id: int = 1) -> list:
        """What CommitLog.put_batch does with the window: admit (a client's send), then enter
        what was written; returns each message's Original (a repeat) or AppendResult."""
        admission = self.window.admit(records(sent)) if dedup else None
        originals = admission.originals if admission is not None else None
        new = [s for i, s in enumerate(sent) if originals is None or originals[i] is None]
        written = []
        for s in new:
            written.append(AppendResult(self.end, SIZE, self.queue_offset, self.clock.now_ms(),
                                        "P"))
            self.end += SIZE
            self.queue_offset += 1
        if written:
            self.window.appended(records(new, queue_id), written,
                                 admission if originals is None else None)
        each = iter(written)
        return [next(each) if originals is None or originals[i] is None else originals[i]
                for i in range(len(sent))]


def records(sent, queue_id: int = 1) -> list:
    """What CommitLog.put_batch hands the window: (record, topic, queue id)."""
    return [(SimpleNamespace(sent_as=s), "T", queue_id) for s in sent]


def send(message_id: str, topic: str = "Orders", crc: int = 7, half: bool = False):
    return message_id, topic, crc, half


def test_a_repeat_is_answered_with_the_original_place():
    log = Log()
    first, = log.put(send("A"))
    log.clock.advance(5)
    again, = log.put(send("A"))
    assert again == Original(1, first.queue_offset, first.wrote_offset, SIZE,
                             first.store_timestamp)
    assert log.end == SIZE  # nothing written for the repeat
    other, = log.put(send("B"))  # a miss
    assert isinstance(other, AppendResult) and other.wrote_offset == SIZE
    assert log.window.stats().hits == 1 and len(log.window) == 2


def test_ids_expire_by_store_time():
    log = Log(seconds=120)
    log.put(send("A"))
    log.clock.advance(119.999)
    assert isinstance(log.put(send("A"))[0], Original)
    log.clock.advance(0.002)  # 120.001 s after A was stored
    fresh, = log.put(send("A"))
    assert isinstance(fresh, AppendResult) and fresh.wrote_offset == SIZE  # a new send
    assert log.window.get("A").commit_log_offset == SIZE  # it took the id
    log.clock.advance(121)
    log.put(send("B"))  # each put trims what left the window
    assert log.window.get("A") is None and len(log.window) == 1


def test_the_bound_evicts_the_oldest_and_says_the_window_got_shorter():
    log = Log(seconds=120, max_entries=3)
    for i in range(5):
        log.put(send(f"id{i}"))
        log.clock.advance(1)
    stats = log.window.stats()
    assert (stats.entries, stats.evictions) == (3, 2)
    assert log.window.get("id0") is None and log.window.get("id1") is None
    # id1, stored at T0 + 1 s, was evicted: the window reaches back 4 s, not 120 s
    assert log.window.stats().effective_window_ms == 4000
    assert isinstance(log.put(send("id1"))[0], AppendResult)  # written again: evicted
    assert log.window.stats().effective_window_ms == 3000  # id2 went for it
    log.clock.advance(200)
    assert log.window.stats().effective_window_ms == 120_000  # evictions long ago


@pytest.mark.parametrize("other, says", [
    (send("A", crc=8), "with another body (body CRC 7, this one's 8)"),
    (send("A", topic="Payments"), "for topic Orders, not Payments"),
    (send("A", half=True), "as a message that is not transactional; this send is one"),
])
def test_an_id_reused_for_another_message_is_refused(other, says):
    log = Log()
    log.put(send("A"))
    with pytest.raises(MessageIllegal) as e:
        log.put(send("B"), other)
    assert str(e.value).startswith("illegal message id: A was stored ")
    assert says in str(e.value)
    assert log.end == SIZE and log.window.get("B") is None  # the batch wrote nothing
    assert log.window.stats().refusals == 1


def test_an_id_twice_in_one_batch_is_refused():
    log = Log()
    with pytest.raises(MessageIllegal, match="X appears twice in the batch"):
        log.put(send("X"), send("Y"), send("X"))
    assert log.end == 0


def test_a_mixed_batch_writes_only_the_new_messages():
    log = Log()
    a, = log.put(send("A"))
    got = log.put(send("B"), send("A"), send("C"))
    assert [type(x) for x in got] == [AppendResult, Original, AppendResult]
    assert got[1].commit_log_offset == a.wrote_offset
    assert log.end == 3 * SIZE


def test_puts_that_are_not_client_sends_are_entered_but_not_checked():
    """A put without dedup (the schedule service's delivery) is never answered from the
    window; the first record of an id wins, so it does not take over its send's entry."""
    log = Log()
    log.put(send("A"))
    delivered, = log.put(send("A"), dedup=False)
    assert isinstance(delivered, AppendResult) and log.end == 2 * SIZE
    assert log.window.get("A").commit_log_offset == 0


# -- which records are client sends -------------------------------------------------------------
def props(**kw) -> dict[str, str]:
    return {codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: "ID", **kw}


def test_sent_as_classifies_records():
    flag = SysFlag
    assert sent_as("ID", "Orders", 0, 5, props()) == ("ID", "Orders", 5, False)
    assert sent_as(None, "Orders", 0, 5, {}) is None  # no id
    # a delayed send, parked in the schedule topic: the client sent it to REAL_TOPIC
    assert sent_as("ID", SCHEDULE_TOPIC, 0, 5, props(REAL_TOPIC="Orders")) == \
        ("ID", "Orders", 5, False)
    # a transactional send: its half; the checker's copy of it is not a send
    assert sent_as("ID", TRANS_HALF_TOPIC, 0, 5, props(REAL_TOPIC="Orders")) == \
        ("ID", "Orders", 5, True)
    assert sent_as("ID", TRANS_HALF_TOPIC, 0, 5,
                   props(REAL_TOPIC="Orders", TRANSACTION_CHECK_TIMES="1")) is None
    # the commit of a half carries the half's id on the real topic: not a send
    assert sent_as("ID", "Orders", flag.TRANSACTION_COMMIT_TYPE, 5, props()) is None
    assert sent_as("ID", "Orders", flag.TRANSACTION_PREPARED_TYPE, 5, props()) is None
    for topic in ("%RETRY%G", "%DLQ%G", "rmq_sys_CONSUMER_STATE", "RMQ_SYS_TRANS_OP_HALF_TOPIC"):
        assert sent_as("ID", topic, 0, 5, props()) is None
    # the same from the stored properties text (reput's form)
    text = codec.properties_to_string(props(REAL_TOPIC="Orders"))
    assert sent_as("ID", SCHEDULE_TOPIC, 0, 5, text) == ("ID", "Orders", 5, False)


def request(message_id: str, offset: int, *, topic: str = "Orders", sys_flag: int = 0,
            ts: int = T0, crc: int = 7, **properties) -> DispatchRequest:
    text = codec.properties_to_string(props(**properties)) if properties else ""
    return DispatchRequest(topic, 0, offset, SIZE, 0, ts, offset // SIZE, "", message_id,
                           sys_flag, 0, text, crc)


def test_reput_feeds_a_slave_commit_and_delivery_records_leave_the_send_alone():
    log = Log()
    half = request("H", 0, topic=TRANS_HALF_TOPIC, REAL_TOPIC="Orders")
    commit = request("H", SIZE, sys_flag=SysFlag.TRANSACTION_COMMIT_TYPE)
    delayed = request("D", 2 * SIZE, topic=SCHEDULE_TOPIC, REAL_TOPIC="Orders")
    delivered = request("D", 3 * SIZE, ts=T0 + 10_000)  # the schedule service's re-put
    log.window.feed([half, commit, delayed, delivered])
    assert log.window.get("H").commit_log_offset == 0
    assert log.window.get("D").commit_log_offset == 2 * SIZE
    assert log.window.fed_to == 4 * SIZE
    # a retried half-send repeats the half; the same id sent as a plain message is refused
    assert log.window.admit(records([send("H", half=True)])).originals[0].commit_log_offset == 0
    with pytest.raises(MessageIllegal, match="as a transactional message; this send is not"):
        log.window.admit(records([send("H")]))


def test_reput_enters_only_what_the_puts_have_not():
    log = Log()
    log.put(send("A"))  # a master's own put: fed_to moves past it
    log.window.feed([request("A", 0, crc=99)])  # reput dispatching it later
    assert log.window.get("A") is not None and log.window.fed_to == SIZE
    log.window.feed([request("B", SIZE)])
    assert log.window.get("B").commit_log_offset == SIZE


def test_a_cut_forgets_what_lay_past_it():
    log = Log()
    for i in range(4):
        log.put(send(f"id{i}"))
    log.window.truncate(2 * SIZE)
    assert [log.window.get(f"id{i}") is not None for i in range(4)] == [True, True, False, False]
    assert log.window.fed_to == 2 * SIZE
    log.window.feed([request("id2", 2 * SIZE, crc=8)])  # the new master's record there
    assert log.window.admit(records([send("id2", crc=8)])).originals[0] is not None


def test_zero_seconds_turns_it_off_and_empties_it():
    log = Log()
    log.put(send("A"))
    log.config = StoreConfig(store_path_root_dir="/nonexistent", duplicate_window_seconds=0)
    assert log.window.admit(records([send("A")])) is None
    log.put(send("A"))
    assert len(log.window) == 0 and log.end == 2 * SIZE


def test_bytes_an_entry():
    """What an entry costs besides its id string (which the put's message allocated): the
    figure behind duplicateWindowMaxEntries' default (store/dedup/window.py)."""
    log = Log(max_entries=200_000)
    ids = [f"01{0xC0A80001:08X}{0x1234:04X}{i:020X}" for i in range(50_000)]  # 34 characters
    batches = [[send(i, crc=n) for n, i in enumerate(ids[k:k + 100])]
               for k in range(0, len(ids), 100)]
    gc.collect()
    tracemalloc.start()
    for batch in batches:
        log.put(*batch)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_entry = used / len(ids)
    print(f"\nduplicate window: {per_entry:.0f} bytes an entry besides its id "
          f"(a 34-character id: {ids[0].__sizeof__()} bytes)")
    assert per_entry < 300


# -- the order's runs against a plain model -------------------------------------------------------
STEPS = st.lists(st.one_of(st.tuples(st.just("put"), st.integers(1, 20)),
                           st.tuples(st.just("wait"), st.integers(1, 50)),  # seconds
                           st.tuples(st.just("cut"), st.integers(0, 100)),  # % of the log kept
                           st.tuples(st.just("bound"), st.integers(1, 40))), max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_the_order_holds_exactly_the_entries_oldest_first(steps):
    """Any mix of puts (each repeating two held ids), waits, cuts and bounds, with runs of 7
    ids (window._RUN is 1024): the window holds exactly what a list in commitlog order
    would, with the same ids leaving first."""
    run = window_module._RUN
    window_module._RUN = 7
    try:
        log = Log(seconds=60, max_entries=1000)
        model: list[tuple[str, int, int]] = []  # (id, offset, stored at), oldest first
        counter = itertools.count()
        for kind, x in steps:
            if kind == "put":
                sent = [send(m[0]) for m in model[:2]] + [send(f"n{next(counter)}")
                                                          for _ in range(x)]
                got = log.put(*sent)
                now = log.clock.now_ms()
                model = [m for m in model if m[2] >= now - 60_000]
                model += [(s[0], g.wrote_offset, now) for s, g in zip(sent, got)
                          if isinstance(g, AppendResult)]
                model = model[max(0, len(model) - log.config.duplicate_window_max_entries):]
            elif kind == "wait":
                log.clock.advance(x)
            elif kind == "cut":
                offset = log.end * x // 100
                log.window.truncate(offset)
                model = [m for m in model if m[1] < offset]
            else:  # at the next put
                log.config = dataclasses.replace(log.config, duplicate_window_max_entries=x)
            assert log.window._live_ids() == [m[0] for m in model]
            assert len(log.window) == len(model)
    finally:
        window_module._RUN = run
