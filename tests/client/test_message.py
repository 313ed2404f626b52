"""The message model (a received message reads its fields from the wire when used) and
official-client message ids."""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import pickle
import re
import subprocess
import sys
import time
import uuid

import pytest

from cluster.client import Message, MessageIdGenerator, next_message_id
from cluster.client.message import ReceivedMessage, from_v2, to_v2
from proto.apache.rocketmq.v2 import definition_pb2 as d

ID = re.compile(r"^01[0-9A-F]{32}$")


def test_ids_have_the_official_v1_layout():
    ids = [next_message_id() for _ in range(3)]
    assert all(ID.match(i) for i in ids) and len(set(ids)) == 3
    prefix = "01" + f"{uuid.getnode():012X}" + f"{os.getpid() & 0xFFFF:04X}"
    assert all(i.startswith(prefix) for i in ids)
    seconds = int(ids[0][18:26], 16)
    assert abs(seconds - (int(time.time()) - 1609459200)) <= 2  # since 2021-01-01 UTC
    seqs = [int(i[26:], 16) for i in ids]
    assert seqs[1] == seqs[0] + 1 and seqs[2] == seqs[1] + 1


def test_a_forked_child_makes_ids_with_its_own_pid():
    parent = next_message_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its id through the pipe, then out without cleanup
        try:
            os.write(write, next_message_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert parent[14:18] == f"{os.getpid() & 0xFFFF:04X}"
    assert ID.match(child) and child[14:18] == f"{pid & 0xFFFF:04X}"


def test_ids_match_the_official_client_codec(tmp_path):
    """rocketmq-python-client's MessageIdCodec in its own process (its generated modules clash
    with ours): same MAC, pid and clock fields as ours for that pid."""
    code = ("import json, os; from rocketmq.v5.util import MessageIdCodec; "
            "print(json.dumps({'pid': os.getpid(), 'id': MessageIdCodec().next_message_id()}))")
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = MessageIdGenerator(pid=theirs["pid"]).next_id()
    assert ID.match(theirs["id"])
    assert ours[:18] == theirs["id"][:18]  # version, MAC, pid
    assert abs(int(ours[18:26], 16) - int(theirs["id"][18:26], 16)) <= 2


def test_to_v2_and_back():
    m = Message("T", b"body", tag="a", keys="k1", properties={"p": "v"}, message_group="g",
                delivery_timestamp_ms=1_700_000_000_123)
    wire = to_v2(m, "ns", now_ms=1_600_000_000_456)
    sp = wire.system_properties
    assert m.message_id and sp.message_id == m.message_id
    assert (wire.topic.name, wire.topic.resource_namespace) == ("T", "ns")
    assert (sp.tag, list(sp.keys), sp.message_group) == ("a", ["k1"], "g")
    assert sp.message_type == d.FIFO and sp.body_encoding == d.IDENTITY
    assert (sp.delivery_timestamp.seconds, sp.delivery_timestamp.nanos) == (1_700_000_000, 123_000_000)
    assert (sp.born_timestamp.seconds, sp.born_timestamp.nanos) == (1_600_000_000, 456_000_000)
    back = from_v2(wire)
    assert (back.topic, back.body, back.tag, back.keys, back.properties) == \
        ("T", b"body", "a", ("k1",), {"p": "v"})
    assert back.delivery_timestamp_ms == 1_700_000_000_123 and back.born_timestamp_ms == 1_600_000_000_456
    assert to_v2(m).system_properties.message_id == m.message_id  # kept for resends
    assert Message("T", b"x", delivery_timestamp_ms=1).message_type == d.DELAY
    assert Message("T", b"x").message_type == d.NORMAL


def test_message_checks():
    with pytest.raises(ValueError):
        Message("", b"x")
    with pytest.raises(TypeError):
        Message("T", "text")
    assert Message("T", bytearray(b"x"), keys=["a", "b"]).keys == ("a", "b")


def test_a_received_message_reads_its_fields_from_the_wire_when_used():
    wire = to_v2(Message("T", b"body", tag="a", properties={"p": "v"}), now_ms=1_600_000_000_456)
    sp = wire.system_properties
    sp.receipt_handle, sp.queue_id, sp.queue_offset, sp.delivery_attempt = "H1", 3, 17, 2
    sp.invisible_duration.seconds = 30
    every = {name: getattr(from_v2(wire), name) for name in ReceivedMessage.__dataclass_fields__}
    plain = ReceivedMessage(**every)
    assert (plain.receipt_handle, plain.queue_offset, plain.invisible_duration_ms) == ("H1", 17, 30_000)
    assert (plain.message_group, plain.delivery_timestamp_ms) == (None, None)  # absent on the wire

    lazy = from_v2(wire)
    assert lazy == plain and plain == lazy and repr(lazy) == repr(plain)
    lazy.receipt_handle = "H2"  # set before it was ever read: the wire's value is not used
    assert lazy.receipt_handle == "H2" and lazy != plain
    back = pickle.loads(pickle.dumps(lazy))
    assert back == lazy and "_wire" not in vars(back)
    assert dataclasses.replace(lazy, queue_id=5).queue_id == 5


def test_a_gzip_body_is_inflated():
    wire = to_v2(Message("T", gzip.compress(b"inflated")))
    wire.system_properties.body_encoding = d.GZIP
    assert from_v2(wire).body == b"inflated"


def test_a_field_is_not_read_until_it_is_used():
    """A body marked GZIP that is not gzip fails only when the body is read: the topic, id
    and receipt handle an ack needs are read without it (an eager conversion raised at once)."""
    wire = to_v2(Message("T", b"not gzip"))
    wire.system_properties.body_encoding = d.GZIP
    wire.system_properties.receipt_handle = "H1"
    m = from_v2(wire)
    assert (m.topic, m.receipt_handle, m.message_id) == ("T", "H1", wire.system_properties.message_id)
    assert set(vars(m)) == {"_wire", "topic", "receipt_handle", "message_id"}
    with pytest.raises(OSError):  # gzip.BadGzipFile
        m.body
