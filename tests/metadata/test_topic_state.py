"""The topic table's state machine in memory (no node): upserts, deletes, imports and snapshots,
the dataVersion every replica derives from the records, and replay through the records'
encoding."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.metadata.topic_state import (TOPIC_RECORDS as RECORDS, TOPIC_TABLE_TOPIC, TopicState,
                                          delete_event, import_event, upsert_event)
from store import codec
from store.json_config import PERM_READ, TopicConfig
from tests.support.table_replay import assert_replays


def test_upsert_delete_import_and_the_data_version():
    state = TopicState()
    assert state.is_empty() and state.data_version == (0, 0)
    state.apply(upsert_event(TopicConfig("A", 8, 8), 100, "admin"))
    state.apply(upsert_event(TopicConfig("A", 8, 8, PERM_READ, True, "MULTI_TAG", 1,
                                         {"+message.type": "FIFO"}), 200, "admin"))
    assert state.get("A") == TopicConfig("A", 8, 8, PERM_READ, True, "MULTI_TAG", 1,
                                         (("+message.type", "FIFO"),))
    state.apply(import_event([TopicConfig("B", 2, 2), TopicConfig("C")], 300))
    state.apply(delete_event("A", 400))
    state.apply(delete_event("nope", 500))  # an absent topic: still a change, like RocketMQ
    assert [c.topic_name for c in state.all()] == ["B", "C"]
    assert state.data_version == (500, 6) and state.version == 5
    view = state.topics_json()
    assert view["dataVersion"] == {"timestamp": 500, "counter": 6}
    assert view["topicConfigTable"]["B"]["readQueueNums"] == 2


def test_unknown_events_and_bad_entries_are_refused():
    state = TopicState()
    with pytest.raises(ValueError, match="unknown topic table event"):
        state.apply({"kind": "rename"})
    with pytest.raises(ValueError):  # ConfigError: 0 queues
        state.apply({"kind": "upsert", "topic": {"topicName": "A", "readQueueNums": 0}, "ts": 1})
    assert state.is_empty() and state.version == 0


def test_records_are_queue_0_of_the_internal_topic_and_only_imports_skip_the_wait():
    up = RECORDS.to_message(upsert_event(TopicConfig("A"), 1, "auto"))
    assert (up.topic, up.queue_id, up.properties[codec.PROPERTY_TAGS]) == (
        TOPIC_TABLE_TOPIC, 0, "upsert")
    assert codec.PROPERTY_WAIT_STORE_MSG_OK not in up.properties
    imp = RECORDS.to_message(import_event([TopicConfig("A")], 1))
    assert imp.properties[codec.PROPERTY_WAIT_STORE_MSG_OK] == "false"


configs = st.builds(
    TopicConfig, st.sampled_from(["A", "B", "C", "%DLQ%G"]), st.integers(1, 16),
    st.integers(1, 16), st.sampled_from([2, 4, 6]), st.booleans(),
    st.sampled_from(["SINGLE_TAG", "MULTI_TAG"]), st.integers(0, 3),
    st.dictionaries(st.sampled_from(["+message.type", "x"]), st.sampled_from(["FIFO", "NORMAL"])))
stamps = st.integers(0, 10 ** 13)
events = st.lists(st.one_of(
    st.builds(upsert_event, configs, stamps, st.sampled_from(["admin", "auto", "ensure"])),
    st.builds(delete_event, st.sampled_from(["A", "B", "C", "%DLQ%G"]), stamps),
    st.builds(import_event, st.lists(configs, max_size=3), stamps),
), max_size=25)


@settings(max_examples=80, deadline=None)
@given(events, events)
def test_a_snapshot_then_the_rest_replays_to_the_same_state(before, after):
    assert_replays(TopicState, RECORDS, before, after,
                   lambda st: (st.topics, st.data_version, st.topics_json()))
