"""What forced cleanup may delete: the `diskPressurePolicy` rule and the count of unconsumed
messages a deletion removes.

RocketMQ deletes the oldest commitlog files above `diskSpaceCleanForciblyRatio` whatever their
age and whatever the consumers have read. Under `protect-unconsumed` (the default) a file is
deleted early (younger than `fileReservedTime`) only when every subscribed consumer group has
consumed every message in it, or when an archive holds it; otherwise retention refuses writes
(DISK_FULL) and names the groups holding the oldest file. `delete-oldest` keeps RocketMQ's rule.
Either way each early deletion counts the unconsumed messages it removed, per group.

The store knows no consumer groups (it imports nothing from cluster/): the node injects
- `consumer_progress`: a callable returning one `QueueConsumed` per (group, topic, queue) the
  groups subscribe to, with the next queue offset the group will consume; None when progress
  is unknown (a slave keeps no consumer state): then nothing is deleted early;
- `archived_up_to` (the hook for the archive, cluster/archive/shipper.py): a callable
  returning the commitlog offset below which the archive answered for every file (held it, or
  refused it for good), or None while this node does not ship. Time-based expiry waits for
  it. No archive: None.
- `archive_held_up_to`: the same, counting only files the archive holds. Under disk pressure
  a file wholly below it may be deleted early even with unconsumed messages (they are still
  counted): the archive has a copy. No archive: None.

Who counts as subscribed (what a RocketMQ operator expects from consumerOffset.json): a group
with a committed position on a queue, or on another queue of the same topic (a queue it never
read counts from the queue's min offset: nothing consumed). Messages of topics no group has
ever consumed count as consumed: otherwise a topic nobody reads would block the disk forever.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

if TYPE_CHECKING:
    from store.queue.consume_queue import ConsumeQueue
    from store.queue.consume_queue_store import ConsumeQueueStore

PROTECT_UNCONSUMED = "protect-unconsumed"
DELETE_OLDEST = "delete-oldest"
TABLE_TOPIC_PREFIX = "rmq_sys_"  # the node's replicated tables (not RMQ_SYS_TRANS_*): written
# under DISK_FULL (MessageStore.append), so consumers' acks can free space


@dataclass(frozen=True)
class QueueConsumed:
    """One group's position on one queue: `offset` is the next queue offset it will consume."""

    group: str
    topic: str
    queue_id: int
    offset: int


ConsumerProgress = Callable[[], "Sequence[QueueConsumed] | None"]
ArchivedUpTo = Callable[[], "int | None"]


def no_consumers() -> Sequence[QueueConsumed]:
    """A standalone store: no consumer groups are known, everything counts as consumed."""
    return ()


def _first_index_at_or_past(cq: "ConsumeQueue", phy_offset: int) -> int:
    """The first queue index whose message starts at or after `phy_offset` (binary search:
    units are in commitlog order; leading fillers go with the first real unit)."""
    lo, hi = cq.min_offset(), cq.max_offset()
    while lo < hi:
        mid = (lo + hi) // 2
        idx, unit = cq._next_real(mid, hi)
        if unit is None or unit[0] >= phy_offset:
            hi = mid
        else:
            lo = idx + 1
    return lo


class ConsumedView:
    """One round's view of consumer progress over the consume queues (built per round: the
    progress callable is called once)."""

    def __init__(self, cq_store: "ConsumeQueueStore",
                 progress: Iterable[QueueConsumed] | None) -> None:
        self.cq_store = cq_store
        self.known = progress is not None
        self.entries = list(progress or ())

    def lowest_needed(self) -> int | None:
        """The lowest commitlog offset some group still has to consume; None when nothing is
        pending (every file may go). Unknown progress: 0 (everything is needed)."""
        if not self.known:
            return 0
        low: int | None = None
        for e in self.entries:
            cq = self.cq_store.find(e.topic, e.queue_id)
            if cq is None:
                continue
            start = max(e.offset, cq.min_offset())
            _, unit = cq._next_real(start, cq.max_offset())
            if unit is not None and (low is None or unit[0] < low):
                low = unit[0]
        return low

    def unconsumed_below(self, phy_end: int) -> dict[str, int]:
        """Per group, how many of its unconsumed messages start below `phy_end` (what deleting
        every file up to there removes). Unknown progress: {"<unknown>": -1}."""
        if not self.known:
            return {"<unknown: no consumer state on this node>": -1}
        out: dict[str, int] = {}
        for e in self.entries:
            cq = self.cq_store.find(e.topic, e.queue_id)
            if cq is None:
                continue
            n = _first_index_at_or_past(cq, phy_end) - max(e.offset, cq.min_offset())
            if n > 0:
                out[e.group] = out.get(e.group, 0) + n
        return out


def describe_holders(holders: dict[str, int], limit: int = 5) -> str:
    """'g1 (120 messages), g2 (7 messages)', the largest first, at most `limit` named."""
    ranked = sorted(holders.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = [f"{g} ({n} messages)" if n >= 0 else g for g, n in ranked[:limit]]
    if len(ranked) > limit:
        parts.append(f"and {len(ranked) - limit} more")
    return ", ".join(parts)
