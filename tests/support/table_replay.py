"""The replay property every replicated table's state machine must have, for hypothesis tests:
apply `before`, take a snapshot, apply `after`; replaying the records (each through its
commitlog encoding) from the start, or from the snapshot alone (retention deleted what preceded
it), must give the live state."""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from cluster.replicated.table_records import TableRecords

S = TypeVar("S")


def assert_replays(new_state: Callable[[], S], records: TableRecords,
                   before: list[dict[str, Any]], after: list[dict[str, Any]],
                   observe: Callable[[S], Any]) -> None:
    """Both replays observe (`observe(state)`: what must be equal) as the live state does."""
    live = new_state()
    for e in before:
        live.apply(e)
    log = [records.to_message(e) for e in before] + [records.to_message(live.snapshot_event())]
    for e in after:
        live.apply(e)
        log.append(records.to_message(e))
    from_start, from_snapshot = new_state(), new_state()
    for i, m in enumerate(log):
        assert m.topic == records.topic and m.queue_id == 0
        event = records.from_body(m.body)
        from_start.apply(event)
        if i >= len(before):
            from_snapshot.apply(event)
    assert observe(from_start) == observe(live)
    assert observe(from_snapshot) == observe(live)
