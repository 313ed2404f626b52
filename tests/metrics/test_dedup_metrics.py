"""The duplicate window's metrics of an in-process node (cluster/metrics/node_collector.py):
ids held, repeats answered, reused ids refused, and the bound's evictions shortening the
window it reports."""
from __future__ import annotations

from cluster.metrics.node_collector import NodeCollector
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from tests.support.v2 import msg


def figures(node) -> dict[str, float]:
    return {sample.name: sample.value for family in NodeCollector(node).collect()
            for sample in family.samples if sample.name.startswith("rmqstore_duplicate_window")}


def test_the_duplicate_window_metrics(nodes):
    node = nodes.start(store={"duplicate_window_max_entries": 3})
    stub = nodes.stub(node)

    def send(message_id: str, body: bytes = b"b") -> int:
        request = s.SendMessageRequest(messages=[msg("T", body, message_id=message_id)])
        return stub.SendMessage(request, timeout=10).status.code

    assert [send(i) for i in ("01A", "01A", "01A")] == [d.OK] * 3
    assert send("01A", b"other") == d.ILLEGAL_MESSAGE_ID
    m = figures(node)
    assert m["rmqstore_duplicate_window_entries"] == 1
    assert m["rmqstore_duplicate_window_hits_total"] == 2
    assert m["rmqstore_duplicate_window_refusals_total"] == 1
    assert m["rmqstore_duplicate_window_evictions_total"] == 0
    assert m["rmqstore_duplicate_window_seconds"] == 120
    assert m["rmqstore_duplicate_window_effective_seconds"] == 120
    for i in range(4):  # five ids past a bound of 3: the two oldest go
        assert send(f"01B{i}") == d.OK
    m = figures(node)
    assert m["rmqstore_duplicate_window_entries"] == 3
    assert m["rmqstore_duplicate_window_evictions_total"] == 2
    assert m["rmqstore_duplicate_window_effective_seconds"] < 120
