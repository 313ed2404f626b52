"""The record format of a replicated table, in memory: one message of the table's topic per
event (queue 0, the kind as its tag, compact JSON body, WAIT=false for no-wait kinds), and
bodies replay refuses to guess at."""
from __future__ import annotations

import pytest

from cluster.replicated.table_records import TableRecordError, TableRecords

RECORDS = TableRecords("rmq_sys_TEST_TABLE", no_wait_kinds=frozenset({"note"}))


def test_an_event_is_one_message_of_the_tables_topic():
    event = {"kind": "add", "name": "a", "by": 2}
    m = RECORDS.to_message(event)
    assert (m.topic, m.queue_id, m.properties) == ("rmq_sys_TEST_TABLE", 0, {"TAGS": "add"})
    assert m.body == b'{"kind":"add","name":"a","by":2}'
    assert RECORDS.from_body(m.body) == event


def test_no_wait_kinds_carry_wait_false():
    assert RECORDS.to_message({"kind": "note"}).properties["WAIT"] == "false"
    assert "WAIT" not in RECORDS.to_message({"kind": "add", "name": "a", "by": 1}).properties


@pytest.mark.parametrize("body, text", [
    (b"not json", "is not JSON"), (b"\xff\xfe", "is not JSON"), (b"[1, 2]", "has no kind"),
    (b'{"name": "a"}', "has no kind"), (b'{"kind": 7}', "has no kind"),
])
def test_a_body_that_is_not_an_event_is_refused(body, text):
    with pytest.raises(TableRecordError, match=text) as e:
        RECORDS.from_body(body, "at offset 3")
    assert "rmq_sys_TEST_TABLE record at offset 3" in str(e.value)
