"""Which messages of one queue a ReceiveMessage hands out, from the group's state and the store.
Pure decisions over two read functions, so the rules are testable without a node.

Order within a queue:
1. Deliveries whose invisibility expired, oldest offset first: redelivered with attempt + 1
   and a new handle; a delivery that already used the group's max attempts goes to the DLQ
   instead; one whose message is gone (retention) is dropped.
2. New messages from the cursor, through the tag filter (what the filter skips is done).
FIFO groups: one message per message group in flight per queue. A new message whose group has
one in flight (or was just handed out) stops the scan there, so later messages of that group
never overtake it; the cursor stays at the blocked message.
With an `AnswerRoom`, the deliveries' records add up to at most its bytes (one answer carrying
them all must fit gRPC's message limits), except that the first delivery of the receive goes
out whatever its size; the room is the receive's, shared by the plans of its queues. A new
message left out for room stops the scan there like a blocked one, and an expired delivery
left out stays in flight for the next.
`acked`: offsets of this queue that the same commit acks first (AckAndReceive records its acks
and its deliveries in one append): they are treated as done, neither redelivered nor blocking
their message group, as if the acks had been applied before planning.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection

from store.codec import MessageRecord
from store.get_result import GetMessageResult

from cluster.consume.state import Inflight, QueueState

PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"


@dataclass(slots=True)
class Delivery:
    """One message handed out by a receive: its record and queue offset, attempt, receipt
    handle and message group."""

    record: MessageRecord
    offset: int
    attempt: int
    handle: int
    message_group: str


@dataclass(slots=True)
class QueuePlan:
    """What one receive decided for one queue (the module docstring): the deliveries, the
    expired ones bound for the DLQ (`dead`) or dropped because their message is gone
    (`vanished`), and how far the cursor moves (`skip_to`). Built and applied by one
    receive; not shared."""

    queue_id: int
    base: int  # the cursor of a queue the group never read (its min offset)
    cursor: int  # where the group's cursor was when planning began
    deliveries: list[Delivery] = field(default_factory=list)
    dead: list[tuple[int, Inflight, MessageRecord]] = field(default_factory=list)
    vanished: list[tuple[int, Inflight]] = field(default_factory=list)
    skip_to: int = 0

    @property
    def changes_state(self) -> bool:
        return bool(self.deliveries or self.dead or self.vanished) or self.skip_to > self.cursor


def plan_queue(queue_id: int, q: QueueState | None, base: int, now_ms: int, want: int, *,
               fifo: bool, max_attempts: int, new_handle: Callable[[], int],
               read_at: Callable[[int], MessageRecord | None],
               read_from: Callable[[int, int], GetMessageResult],
               room: "AnswerRoom | None" = None, acked: Collection[int] = ()) -> QueuePlan:
    cursor = q.cursor if q is not None else base
    plan = QueuePlan(queue_id, base, cursor)
    room = room or _UNLIMITED
    inflight = q.inflight if q is not None else {}
    plan.skip_to = cursor
    # One pass over what is in flight finds the expired deliveries; only those are sorted
    # (every receive comes here, and a queue can hold thousands in flight).
    gone: set[int] = set(acked)  # acked, dead or vanished: no longer in flight, block nothing
    expired = sorted(o for o, e in inflight.items()
                     if e.invisible_until <= now_ms and o not in gone)
    for offset in expired:
        if len(plan.deliveries) >= want:
            break  # the rest stay in flight (and block their groups, below)
        entry = inflight[offset]
        record = read_at(offset)
        if record is None:
            plan.vanished.append((offset, entry))
            gone.add(offset)
        elif entry.attempt >= max_attempts:
            plan.dead.append((offset, entry, record))
            gone.add(offset)
        elif not room.take(record):
            break  # no room in this answer: it stays in flight (and blocks its group)
        else:
            plan.deliveries.append(Delivery(record, offset, entry.attempt + 1, new_handle(),
                                            entry.message_group))
    # FIFO: a message group with a delivery in flight (still invisible, redelivered now, or
    # expired but left for a later receive) blocks its later messages
    blocked = {e.message_group for o, e in inflight.items()
               if e.message_group and o not in gone} if fifo else set()
    left = want - len(plan.deliveries)
    if left <= 0 or room.full:
        return plan
    result = read_from(cursor, left)
    for record in result.messages:
        group = record.properties.get(PROPERTY_MESSAGE_GROUP, "") if fifo else ""
        if (group and group in blocked) or not room.take(record):
            plan.skip_to = max(cursor, record.queue_offset)
            return plan
        plan.deliveries.append(Delivery(record, record.queue_offset, 1, new_handle(), group))
        if group:
            blocked.add(group)
    plan.skip_to = max(cursor, result.next_begin_offset)
    return plan


class AnswerRoom:
    """The bytes of records one receive's answer has left (None: no limit), taken by the
    deliveries the plans of its queues hand out; the first is taken whatever its size.
    One per receive attempt, used by one thread."""
    __slots__ = ("left", "free")

    def __init__(self, max_bytes: int | None) -> None:
        self.left, self.free = max_bytes, True

    @property
    def full(self) -> bool:
        return self.left is not None and self.left <= 0 and not self.free

    def take(self, record: MessageRecord) -> bool:
        if self.left is None:
            return True
        size = record.total_size
        if size > self.left and not self.free:
            return False
        self.left -= size
        self.free = False
        return True


_UNLIMITED = AnswerRoom(None)  # take() never changes it
