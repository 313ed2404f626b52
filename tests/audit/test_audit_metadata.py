"""The audit's metadata checks (cluster.audit.metadata) on stores of a real replicated run (see
conftest.py): the clean copies agree on their topic tables and committed offsets and report each
group's lag; each injected metadata damage is found with its kind and severity; the report, the
summary and the chart show the consumer lag. Rules without Spark at the end."""
from __future__ import annotations

from types import SimpleNamespace

from cluster.audit import metadata, reference, report
from cluster.audit.metadata import TableEvent
from cluster.audit.scan import TABLE_DELETE, TABLE_OTHER, TABLE_SNAPSHOT
from cluster.consume.records import STATE_TOPIC
from cluster.metadata.topic_state import TOPIC_TABLE_TOPIC

from tests.support.audit_stores import CONSUMERS, NAMES, PER_TOPIC, RESET, TOPICS, by_kind, layouts_of

METADATA_KINDS = ("unroutable_queue", "topic_table_mismatch", "consumer_offset_mismatch",
                  "table_record_bad")


def kinds(result) -> set[str]:
    return {k[1] for k in result.counts}


def test_clean_metadata_agrees_and_reports_consumer_lag(clean_result):
    r = clean_result
    assert not kinds(r) & set(METADATA_KINDS), r.counts
    for name in NAMES:
        m = r.metadata["replicas"][name]
        assert (m["topic_table_records"], m["topics"], m["topics_at_bound"]) == (3, 3, 3), m
        assert m["consumer_queues"] == TOPICS["AuditOrders"] + 1, m  # the group's 4 queues and the reset one
    assert r.metadata["bound"] == min(s["confirm_offset"] for s in r.replicas)
    group, topic, count = CONSUMERS
    rows = [q for q in r.consumers if q["group"] == group]
    assert {q["topic"] for q in rows} == {topic} and len(rows) == TOPICS[topic]
    assert all(q["source"] == "table" and q["max_offset"] == PER_TOPIC // TOPICS[topic] for q in rows)
    assert sum(q["lag"] for q in rows) == PER_TOPIC - count
    r_group, r_topic, r_queue, r_offset = RESET
    [reset] = [q for q in r.consumers if q["group"] == r_group]
    assert (reset["topic"], reset["queue_id"], reset["committed"]) == (r_topic, r_queue, r_offset)
    assert reset["lag"] == PER_TOPIC // TOPICS[r_topic] - r_offset


def test_the_run_wrote_a_consumer_state_snapshot(clean):
    """So the job's replay from the newest snapshot below the bound is what the Spark-equals-
    reference test compares with the reference's replay of every record."""
    [lay] = layouts_of({"master": clean["master"]})
    rows, _, _ = reference.scan_replica(lay, 256 << 20)
    events = reference._table_events(lay, {r.phys: r for r in rows})
    snapshots = [e.phys for e in events[STATE_TOPIC] if e.mark == TABLE_SNAPSHOT]
    assert snapshots and snapshots[-1] < lay.confirm_offset
    assert events[STATE_TOPIC][0].phys < snapshots[0]


def test_clean_report_summary_and_chart_show_consumer_lag(clean, clean_result, tmp_path):
    rep = report.build(clean_result, layouts_of(clean), {})
    group, _, count = CONSUMERS
    groups = {g["group"]: g for g in rep["consumer_lag"]["groups"]}
    assert groups[group]["lag"] == PER_TOPIC - count and groups[group]["queues"] == 4
    assert rep["consumer_lag"]["replica"] == "master" and rep["metadata"]["replicas"]["slave2"]["topics"] == 3
    text = report.summary_text(rep)
    assert f"{group}: total {PER_TOPIC - count} over 4 queue(s)" in text, text
    assert "Metadata (tables compared below the group's lowest confirm offset" in text
    png = tmp_path / "lag.png"
    report.chart(rep, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_topic_table_that_lost_an_update_is_topic_table_mismatch_error(meta_result, meta_damaged):
    _, info = meta_damaged
    r = meta_result
    assert r.reference == "master" and r.metadata["bound"] == info["bound"]
    [f] = by_kind(r, "topic_table_mismatch", "slave1")
    assert (f["severity"], f["topic"]) == ("error", "AuditLogs")
    d = f["details"]
    assert d["fields"] == "readQueueNums,writeQueueNums" and d["bound"] == info["bound"]
    assert (d["config"]["readQueueNums"], d["reference_config"]["readQueueNums"]) == (2, 4)
    assert not by_kind(r, "topic_table_mismatch", "slave2"), "slave2 holds the update"
    assert r.metadata["replicas"]["slave1"]["topic_table_records"] == 3
    assert r.metadata["replicas"]["slave2"]["topic_table_records"] == 4


def test_consumer_offset_record_on_one_replica_is_consumer_offset_mismatch_error(meta_result):
    for name in ("slave1", "slave2"):
        [f] = by_kind(meta_result, "consumer_offset_mismatch", name)
        assert (f["severity"], f["topic"], f["queue_id"], f["queue_offset"]) == ("error", "AuditOrders", 1, None)
        assert f["details"]["group"] == "audit-lost" and f["details"]["reference_committed"] == 7
        assert f["details"]["missing"] == "on the replica"
    lost = [q for q in meta_result.consumers if q["group"] == "audit-lost"]
    assert [(q["queue_id"], q["committed"], q["lag"]) for q in lost] == [(1, 7, PER_TOPIC // 4 - 7)]


def test_committed_offset_of_the_table_past_the_queue_end_is_consumer_offset_ahead(meta_result):
    found = by_kind(meta_result, "consumer_offset_ahead")
    assert sorted(f["replica"] for f in found) == sorted(NAMES)
    for f in found:
        assert (f["severity"], f["topic"], f["queue_id"], f["queue_offset"]) == ("error", "AuditOrders", 2, 9999)
        assert f["details"]["group"] == "audit-ahead" and f["details"]["source"] == "table"
        assert f["details"]["queue_max"] == PER_TOPIC // 4
    [ahead] = [q for q in meta_result.consumers if q["group"] == "audit-ahead"]
    assert ahead["lag"] == PER_TOPIC // 4 - 9999  # negative: the offset is past the end


def test_messages_the_topic_table_does_not_route_are_unroutable_queue_errors(meta_result, meta_damaged):
    _, info = meta_damaged
    found = {(f["topic"], f["queue_id"]): f for f in by_kind(meta_result, "unroutable_queue")}
    assert set(found) == {("AuditPayments", 3), ("AuditGhost", 0)}, found
    beyond, ghost = found[("AuditPayments", 3)], found[("AuditGhost", 0)]
    assert beyond["replica"] == ghost["replica"] == "master"
    assert beyond["severity"] == ghost["severity"] == "error"
    assert beyond["offset"] == info["unroutable"][0] >= info["bound"]
    assert beyond["details"]["reason"] == "queue id 3 >= readQueueNums 3"
    assert (beyond["details"]["cq_max_offset"], beyond["details"]["last_queue_offset"]) == (3, 2)
    assert ghost["details"]["reason"] == "topic missing from the topic table"
    assert ghost["details"]["cq_max_offset"] == 2
    assert meta_result.errors == sum(n for (_, k, sev), n in meta_result.counts.items()
                                     if sev == "error" and k in METADATA_KINDS + ("consumer_offset_ahead",)), \
        meta_result.counts


def test_meta_report_summary(meta_damaged, meta_result):
    rep = report.build(meta_result, layouts_of(meta_damaged[0]), {})
    assert rep["exit_status"] == 1
    text = report.summary_text(rep)
    assert "readQueueNums 2 vs reference 4" in text, text
    assert "group audit-lost at" in text and "queue id 3 >= readQueueNums 3" in text


# -- the rules without Spark ----------------------------------------------------------------------
def _facts(confirm: dict[str, int]):
    return {n: SimpleNamespace(layout=SimpleNamespace(confirm_offset=c, consumer_offsets={}), holes=[],
                               valid_end=c) for n, c in confirm.items()}


def _ev(phys: int, body: str, mark: int = TABLE_OTHER) -> TableEvent:
    return TableEvent(phys, mark, body.encode())


UPSERT = ('{"kind":"upsert","topic":{"topicName":"T","readQueueNums":2,"writeQueueNums":2,"perm":6},'
          '"ts":5,"by":"admin"}')


def test_replay_from_the_newest_snapshot_below_the_bound_equals_the_whole_replay():
    events = [_ev(0, UPSERT), _ev(10, '{"kind":"delete","topic":"T","ts":6}', TABLE_DELETE),
              _ev(20, '{"kind":"snapshot","topics":[],"changes":2,"ts":6}', TABLE_SNAPSHOT),
              _ev(30, UPSERT.replace('"T"', '"U"')),
              _ev(40, '{"kind":"snapshot","topics":[],"changes":4,"ts":9}', TABLE_SNAPSHOT)]
    assert metadata.snapshot_start(events, 35) == 20 and metadata.snapshot_start(events, 20) is None
    for below in (None, 35):
        whole = metadata.replay(TOPIC_TABLE_TOPIC, events, below)
        tail = metadata.replay(TOPIC_TABLE_TOPIC, events, below, start=metadata.snapshot_start(events, 35))
        assert whole.state.topics_json() == tail.state.topics_json() and whole.error is None
    assert sorted(metadata.replay(TOPIC_TABLE_TOPIC, events, 35).state.topics) == ["U"]


def test_a_record_that_does_not_apply_stops_the_replay_and_is_table_record_bad():
    facts = _facts({"a": 100, "b": 100})
    good = [_ev(0, UPSERT)]
    bad = good + [_ev(5, "not json"), _ev(9, UPSERT.replace('"T"', '"U"'))]
    meta = metadata.replay_replicas(facts, {"a": {TOPIC_TABLE_TOPIC: good}, "b": {TOPIC_TABLE_TOPIC: bad}},
                                    {}, from_snapshot=False)
    assert meta["b"].topics.error[0] == 5 and meta["b"].topics.applied == 1
    found = metadata.findings(facts, "a", meta, {}, [])
    assert [(f["replica"], f["kind"], f["offset"]) for f in found] == [("b", "table_record_bad", 5)]
    # an unknown event kind is refused by the state machine itself
    odd = metadata.replay(STATE_TOPIC, [_ev(0, '{"kind":"teleport"}')])
    assert odd.error[0] == 0 and "teleport" in odd.error[1]


def test_a_deleted_topic_that_still_holds_messages_is_info():
    facts = _facts({"a": 100})
    events = {"a": {TOPIC_TABLE_TOPIC: [_ev(0, UPSERT), _ev(50, '{"kind":"delete","topic":"T","ts":7}',
                                                             TABLE_DELETE)]}}
    meta = metadata.replay_replicas(facts, events, {}, from_snapshot=True)
    holding = {("a", "T", 0): (20, 4), ("a", "T", 5): (30, 0), ("a", "rmq_sys_X", 0): (1, 1)}
    found = metadata.findings(facts, "a", meta, holding, [])
    assert {(f["queue_id"], f["severity"]) for f in found} == {(0, "info"), (5, "info")}
    assert all(f["details"]["reason"].startswith("topic deleted at 50") for f in found)
