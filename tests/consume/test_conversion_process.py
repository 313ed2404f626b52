"""The conversion process (cluster/consume/conversion_worker.py, conversion_process.py) and the
bytes it answers (delivery_bytes.py): the parts of a record are the same message record_to_v2
builds, a record the worker cannot read is answered None, a cached record is never served
after its bytes changed, and a real child serves the parent on an event loop, is replaced
when killed and never decides what is delivered (its caller converts what it cannot)."""
from __future__ import annotations

import asyncio
import os
import signal
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store import codec
from common.clock import ManualClock
from store.codec import Message
from store.codec.layout import SysFlag
from store.config import StoreConfig
from store.get_result import QueueRef
from store.message_store import MessageStore

from cluster.consume.answer_forms import AnswerForms, Handout
from cluster.consume.conversion_process import ConversionProcess
from cluster.consume.planner import Delivery
from cluster.consume.receipt import IssuedHandles
from cluster.consume.conversion_worker import ConversionWorker
from cluster.consume.delivery_bytes import EncodedAnswer, delivered_message, message_parts, set_ack
from cluster.v2.convert import RESERVED_PROPERTY_NAMES, record_to_v2

FILE_SIZE = 64 * 1024


@pytest.fixture
def store(tmp_path):
    st = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path / "store"),
                                  mapped_file_size_commit_log=FILE_SIZE,
                                  mapped_file_size_consume_queue=20 * 256),
                      clock=ManualClock())
    st.start()
    yield st
    st.shutdown()


def put(store, n: int, start: int = 0, body_size: int = 900) -> list:
    """n records of topic T (bodies of body_size bytes, a few with user properties), read
    back decoded."""
    for i in range(start, start + n):
        props = {"TAGS": f"tag{i % 3}", "KEYS": f"k{i} shared", "UNIQ_KEY": f"U{i:030d}"}
        if i % 2:
            props["color"] = "blue"
        result = store.put_message(Message("T", b"%06d" % i + b"x" * body_size, i % 2, props,
                                           0, 0, 1_700_000_000_000 + i, "10.0.0.9:4242"))
        assert result.ok, result
    store.reput.catch_up()
    out = []
    for qid in (0, 1):
        out += store.get_messages("T", qid, 0, 1024).messages
    return sorted((r for r in out if r.queue_offset >= 0), key=lambda r: r.physical_offset)[
        -n:]


def delivered(record, handle="R2:0:1:2:" + "A" * 32, attempt=2, invisible_ms=30_250):
    """What AnswerForms._fill builds for one delivery."""
    message = d.Message()
    sp = record_to_v2(record, out=message).system_properties
    sp.receipt_handle = handle
    sp.delivery_attempt = attempt
    sp.invisible_duration.seconds = invisible_ms // 1000
    sp.invisible_duration.nanos = invisible_ms % 1000 * 1_000_000
    return message


# -- the bytes -------------------------------------------------------------------------------
def test_an_answer_built_from_parts_parses_as_the_one_built_in_place(store):
    records = put(store, 6)
    status = d.Status(code=d.OK, message="OK")
    entries = [delivered_message(message_parts(r), f"R2:{r.queue_id}:{r.queue_offset}:9:"
                                 + "B" * 32, r.queue_offset + 1, 12_001) for r in records]
    answer = EncodedAnswer(status, 1_700_000_123_456, entries)
    expected = br.ReceiveMessagesResponse(status=status)
    expected.delivery_timestamp.FromMilliseconds(1_700_000_123_456)
    for r in records:
        expected.messages.append(delivered(
            r, f"R2:{r.queue_id}:{r.queue_offset}:9:" + "B" * 32, r.queue_offset + 1, 12_001))
    assert br.ReceiveMessagesResponse.FromString(answer.SerializeToString()) == expected
    assert answer.messages[1].user_properties["color"] == "blue"  # read in process: parsed
    ack = s.AckMessageResponse(status=d.Status(code=d.OK, message="OK"))
    set_ack(answer, ack)
    expected.ack.CopyFrom(ack)
    assert br.ReceiveMessagesResponse.FromString(answer.SerializeToString()) == expected
    assert answer.ack == ack
    # whole seconds and zero nanos are left out as protobuf leaves them out
    message = d.Message.FromString(delivered_message(message_parts(records[0]), "h", 1, 60_000))
    assert message.system_properties.invisible_duration.seconds == 60
    assert message == delivered(records[0], "h", 1, 60_000)


# -- the worker, without a process -----------------------------------------------------------
def test_the_worker_answers_each_record_as_message_parts_reads_it(store):
    records = put(store, 150)  # across commitlog files
    assert len({r.physical_offset // FILE_SIZE for r in records}) >= 2
    worker = ConversionWorker(store.commitlog.queue.directory)
    items = [(r.physical_offset, r.total_size) for r in records]
    kind, request_id, answers = worker.handle(("parts", 7, items, [], 0, 0))
    assert (kind, request_id) == ("parts", 7)
    assert answers == [message_parts(r) for r in records]
    assert worker.converted == len(items) > 100 and worker.hits == 0
    # asked again: from the cache
    assert worker.handle(("parts", 8, items[:3], [], 0, 0))[2] == answers[:3]
    assert worker.hits == 3
    worker.close()


def test_a_record_the_worker_cannot_read_is_answered_none(store):
    records = put(store, 3)
    worker = ConversionWorker(store.commitlog.queue.directory)
    r = records[1]
    answers = worker.handle(("parts", 1, [(r.physical_offset, r.total_size + 1),  # wrong size
                                          (r.physical_offset + 4, r.total_size),  # not a record
                                          (10 * FILE_SIZE, 100),  # no such file
                                          (r.physical_offset, r.total_size)], [], 0, 0))[2]
    assert answers == [None, None, None, message_parts(r)]
    worker.close()


def test_a_cached_record_is_not_served_once_its_bytes_changed(tmp_path, store):
    """A commitlog truncated and written again holds another record at the same offset: the
    cache keys on the record's first bytes, and after a cut the parent counted (a file that
    may be back under its old name) every file is mapped again."""
    first = put(store, 4)
    directory = store.commitlog.queue.directory
    worker = ConversionWorker(directory)
    item = (first[2].physical_offset, first[2].total_size)
    worker.prefetch(*item)
    assert worker.cache
    pos = item[0] % FILE_SIZE
    path = os.path.join(directory, sorted(os.listdir(directory))[0])

    def with_store_timestamp(ms: int):
        """Record 2 with another store timestamp, written into the file as `path` holds it."""
        with open(path, "r+b") as f:
            os.pwrite(f.fileno(), ms.to_bytes(8, "big"), pos + 56)
            f.seek(pos)
            changed = codec.decode(f.read(item[1]), 0)
        assert changed.store_timestamp == ms
        return changed

    changed = with_store_timestamp(1_800_000_000_000)  # in place: the same file
    assert worker.handle(("parts", 1, [item], [], 0, 0))[2][0] == message_parts(changed) \
        != message_parts(first[2])
    # a commitlog cut and written again: a new file under the same name (the parent counts
    # the cut), its record changed again
    replacement = path + ".new"
    with open(path, "rb") as src, open(replacement, "wb") as dst:
        dst.write(src.read())
    os.replace(replacement, path)
    before = store.commitlog.truncations  # what the parent sends: a cut counts
    store.commitlog.queue.truncate_to(store.commitlog.max_offset())
    assert store.commitlog.truncations == before + 1
    again = with_store_timestamp(1_900_000_000_000)
    assert worker.handle(("parts", 2, [item], [], 0, 1))[2][0] == message_parts(again)
    worker.close()


# -- the child process ----------------------------------------------------------------------
def run(coro):
    return asyncio.run(coro)


async def until_ready(conversion: ConversionProcess, items) -> list:
    """Ask until the child answers (it answers None until it is ready)."""
    for _ in range(500):
        answers = await conversion.parts(items)
        if answers is not None:
            return answers
        await asyncio.sleep(0.01)
    raise AssertionError("the conversion process never became ready")


def test_a_child_answers_many_requests_in_flight_and_is_replaced_when_killed(store):
    records = put(store, 40)
    items = [(r.physical_offset, r.total_size) for r in records]
    expected = [message_parts(r) for r in records]

    async def scenario():
        conversion = ConversionProcess(store.commitlog.queue.directory, restart_after_s=0.0)
        try:
            assert await conversion.parts(items) is None  # not ready yet: convert yourself
            assert await until_ready(conversion, items[:1]) == expected[:1]
            answers = await asyncio.gather(*(conversion.parts(items[i:i + 4], items[i + 4:i + 8])
                                             for i in range(0, 40, 4)))
            assert [p for a in answers for p in a] == expected
            pid = conversion.pid
            os.kill(pid, signal.SIGKILL)
            lost = await conversion.parts(items)  # the dead child answers nothing
            if lost is not None:  # it answered before the kill landed: the next one sees it
                lost = await conversion.parts(items)
            assert lost is None
            assert await until_ready(conversion, items) == expected
            assert conversion.pid != pid and conversion.starts == 2
        finally:
            conversion.close()
        assert conversion.pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    run(scenario())


def test_a_child_that_does_not_answer_in_time_is_replaced(store):
    records = put(store, 2)
    items = [(r.physical_offset, r.total_size) for r in records]

    async def scenario():
        conversion = ConversionProcess(store.commitlog.queue.directory, timeout_s=0.3,
                                       restart_after_s=0.0)
        try:
            await until_ready(conversion, items)
            stopped = conversion.pid
            os.kill(stopped, signal.SIGSTOP)  # alive, answering nothing
            assert await conversion.parts(items) is None
            assert conversion.pid is None or conversion.pid != stopped
            assert await until_ready(conversion, items) == [message_parts(r) for r in records]
        finally:
            conversion.close()
    run(scenario())


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"),
                min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=300), compressed=st.booleans(),
       tags=st.none() | _TEXT.filter(lambda t: "|" not in t and t.strip()),
       keys=st.lists(_TEXT.filter(lambda k: " " not in k), max_size=3),
       user=st.dictionaries(_TEXT.filter(lambda k: k not in RESERVED_PROPERTY_NAMES), _TEXT,
                            max_size=3),
       group=st.none() | _TEXT, trace=st.none() | _TEXT, deliver=st.none() | st.integers(0, 2**41),
       prepared=st.booleans(), reconsume=st.integers(0, 16), queue_offset=st.integers(0, 2**40),
       attempt=st.integers(1, 2**31 - 1), invisible_ms=st.integers(0, 12 * 3600_000))
def test_the_parts_and_a_delivery_parse_as_the_message_built_in_place(
        body, compressed, tags, keys, user, group, trace, deliver, prepared, reconsume,
        queue_offset, attempt, invisible_ms):
    props = dict(user)
    if tags is not None:
        props["TAGS"] = tags
    if keys:
        props["KEYS"] = " ".join(keys)
    if group is not None:
        props["__SHARDINGKEY"] = group
    if trace is not None:
        props["TRACE_CONTEXT"] = trace
    if deliver is not None:
        props["TIMER_DELIVER_MS"] = str(deliver)
    if prepared:
        props["TRAN_MSG"] = "true"
    stored = zlib.compress(body) if compressed else body
    record = codec.decode(codec.encode(
        Message("Topic", stored, 3, props, 0, SysFlag.COMPRESSED if compressed else 0,
                1_700_000_000_123, "10.1.2.3:4567"), store_host="10.9.8.7:10911").data)
    record.queue_offset, record.reconsume_times = queue_offset, reconsume
    built = d.Message.FromString(delivered_message(message_parts(record), "R2:h", attempt,
                                                   invisible_ms))
    assert built == delivered(record, "R2:h", attempt, invisible_ms)


def test_the_forms_built_in_place_read_queue_refs_and_leave_out_a_record_gone(store):
    """Without the child (fewer deliveries than CHILD_MIN_DELIVERIES, or it cannot serve) a
    receive planned from QueueRefs is answered in place: each ref read into its record, one
    no file holds any more (retention) left out; its delivery expires later."""
    records = put(store, 2)
    forms = AnswerForms(store, IssuedHandles(b"k" * 32), ManualClock(),
                        ConversionProcess(store.commitlog.queue.directory))
    refs = [QueueRef(r.queue_offset, r.physical_offset, r.total_size) for r in records]
    gone = QueueRef(99, 50 * FILE_SIZE, records[0].total_size)
    handout = Handout("T", "G", 30_000, [
        (r.queue_id, Delivery(ref, r.queue_offset, 1, i, ""))
        for i, (r, ref) in enumerate(zip(records, refs))] + [(0, Delivery(gone, 99, 1, 7, ""))])
    answer = run(forms.batch(handout))
    assert [m.body for m in answer.messages] == [r.body for r in records]
    for m, r in zip(answer.messages, records):
        assert m == delivered(r, m.system_properties.receipt_handle, 1, 30_000)
    assert forms.conversion.pid is None  # two deliveries: the child was not asked
