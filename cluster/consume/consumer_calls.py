"""The v2 consumer calls on a master: ReceiveMessage, UpdateOffset and GetOffset here;
AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue in settle_calls.py.
Each is a coroutine on the server's event loop. Validation first (a refusal changes nothing),
then one state change under the consumer service's lock (consumer_service.py), then the wait
for the flush/replication policy outside it, awaited (the slaves' acks arrive on the same
loop).

ReceiveMessage hands out up to batch_size messages across the topic's readable queues, starting
with the queue the client named: expired deliveries first, then new messages (planner.py). Each
carries a receipt handle (receipt.py), its delivery attempt and the invisible duration. When
nothing is there the call waits for new dispatches or the next expiry, at most the client's
long_polling_timeout and always within its deadline. A pop is not waited for (at-least-once:
losing it in a failover only redelivers), acks, invisibility changes and offsets are.
The handout (`Handout`) is answered as the v2 stream (a response per message) or, for
ReceiveMessages (proto/batch_receive.proto, our client's), in one response (answer_forms.py,
with the conversion process when the node has one); that one carries at most
ConsumeSettings.max_answer_bytes of records (the first whatever its size), so it always fits
gRPC's message limits.

Push consumers receive with auto_renew and no invisible duration: they get 60 s (the proxy's
defaultInvisibleTimeMills). This server does not renew those deliveries while the client is
still consuming (the proxy does), so a consume that takes longer is redelivered.
ChangeInvisibleDuration accepts 0 (visible again now) and up: push consumers nack with it.

A delivery that already used the group's max attempts (retryMaxTimes + 1, RocketMQ's default
16 + 1) is copied into `%DLQ%<group>` (queue 0, created on first use) and counts as done.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from proto import batch_receive_pb2 as br
from proto.apache.rocketmq.v2 import definition_pb2 as d
from proto.apache.rocketmq.v2 import service_pb2 as s
from store.reader import TagFilter

from cluster.consume.answer_forms import AnswerForms, Handout
from cluster.consume.delivery_bytes import EncodedAnswer
from cluster.consume.dead_letter import dead_letter, dlq_topic, record_at
from cluster.consume.consumer_service import settled
from cluster.consume.conversion_process import ConversionProcess
from cluster.consume.planner import AnswerRoom, Delivery, plan_queue
from cluster.consume.state import GroupInfo
from cluster.consume.settle_calls import (OK, CarriedAck, ConsumeContext, SettleCalls,
                                          ack_answer, duration_ms, group_name)
from cluster.v2.long_poll import Attempt, Interest, long_poll
from cluster.v2.convert import tag_expression
from cluster.v2.v2_status import V2Error

if TYPE_CHECKING:
    from cluster.messaging.telemetry import StreamBudget



class ConsumerCalls:
    """ReceiveMessage (both answer forms), AckAndReceive and the offsets of a master (the
    module doc), as coroutines. Holds its ConsumeContext (shared with `settle`, the calls that
    settle a delivery by its handle) and the long polls' budget; builds its answers with
    AnswerForms. Owns no state of its own: the consumer state is the context's consumer
    service's, under its lock."""

    def __init__(self, context: ConsumeContext, settle: SettleCalls,
                 budget: "StreamBudget | None", conversion: ConversionProcess | None = None
                 ) -> None:
        self.context = context
        self.settle = settle
        self.budget = budget  # long polls waiting on the event loop
        self.answers = AnswerForms(context.consumers.store, context.handles, context.clock,
                                   conversion)
        # messages handed out since the node started, redeliveries included (the console's
        # consume rate); added to on the server's event loop only
        self.delivered = 0

    @property
    def consumers(self):
        return self.context.consumers

    # -- ReceiveMessage -----------------------------------------------------------------------
    async def receive(self, request: s.ReceiveMessageRequest,
                      time_remaining: Callable[[], float | None] = lambda: None
                      ) -> list[s.ReceiveMessageResponse]:
        """ReceiveMessage answered as the v2 stream's responses."""
        return await self.answers.stream(await self._handout(
            request, time_remaining, refs=self.answers.reads_records))

    async def receive_batch(self, request: s.ReceiveMessageRequest,
                            time_remaining: Callable[[], float | None] = lambda: None
                            ) -> br.ReceiveMessagesResponse | EncodedAnswer:
        """The same receive answered in one ReceiveMessagesResponse (proto/batch_receive.proto)."""
        return await self.answers.batch(await self._handout(
            request, time_remaining, self.context.settings.max_answer_bytes,
            refs=self.answers.reads_records))

    async def ack_and_receive_batch(
            self, ack: s.AckMessageRequest, request: s.ReceiveMessageRequest,
            time_remaining: Callable[[], float | None] = lambda: None
    ) -> tuple[s.AckMessageResponse, br.ReceiveMessagesResponse | EncodedAnswer]:
        """AckAndReceive on a master: the ack's entries are checked by the receive's first
        attempt, under the same lock, and its `acks` record goes out in the same append as
        that attempt's deliveries (one append, one dispatch, one replicated chunk per call, not
        two); the plan treats the acked offsets as done (planner.py), so the answer is the
        one of the ack applied first (a FIFO group's next message is free for the same call).
        The ack's answer waits for that append under the flush/replication policy.
        A receive refused before its first attempt leaves the ack to commit alone; an append
        refused refuses both (nothing applied)."""
        try:
            carried = self.context.carried_ack(ack)
        except V2Error as e:  # the ack's request refused: the receive runs on its own
            return (s.AckMessageResponse(status=e.status()),
                    await self.receive_batch(request, time_remaining))
        try:
            answer = await self.answers.batch(await self._handout(
                request, time_remaining, self.context.settings.max_answer_bytes, carried,
                refs=self.answers.reads_records))
        except V2Error as e:
            if carried.checked and not carried.committed:  # its append was refused
                return s.AckMessageResponse(status=e.status()), \
                    br.ReceiveMessagesResponse(status=e.status())
            answer = br.ReceiveMessagesResponse(status=e.status())
        if not carried.checked:  # the receive was refused before it took the ack
            try:
                return await self.settle.ack(ack), answer
            except V2Error as e:
                return s.AckMessageResponse(status=e.status()), answer
        appended = carried.appended
        status = OK if appended is None else settled(await appended)
        return ack_answer(carried.results, status), answer

    async def _handout(self, request: s.ReceiveMessageRequest,
                       time_remaining: Callable[[], float | None],
                       max_bytes: int | None = None, carried: CarriedAck | None = None, *,
                       refs: bool = False) -> "Handout":
        """The request checked (an unknown group created, its record awaited), then the long
        poll: its attempts append the deliveries' records and never wait for them; its waits
        hold no thread (long_poll.py). `max_bytes`: what the deliveries' records may add up to
        (planner.py). `carried`: an ack the first attempt commits with its deliveries
        (ack_and_receive_batch). `refs`: new messages may be handed out as QueueRefs (see
        _receive_plan)."""
        attempt, wait_s, interest = await self._receive_plan(request, max_bytes, carried,
                                                             refs=refs)
        handout = await long_poll(attempt, interest, wait_s=wait_s, waiter=self.context.waiter,
                                  clock=self.context.clock, budget=self.budget,
                                  time_remaining=time_remaining)
        self.delivered += len(handout.deliveries)
        return handout

    async def _group(self, group: str) -> GroupInfo:
        """A group's config; an unknown one is created (RocketMQ's autoCreateSubscriptionGroup)
        and its record awaited."""
        consumers = self.consumers
        await consumers.loaded()
        info, created = consumers.group_or_create(group)
        if created is not None:
            status = settled(await created)
            if status.code != d.OK:
                raise V2Error(status.code, status.message)
        return info

    async def _receive_plan(self, request: s.ReceiveMessageRequest,
                            max_bytes: int | None = None, carried: CarriedAck | None = None, *,
                            refs: bool = False
                            ) -> tuple[Callable[[], Attempt["Handout"]], float, Interest]:
        """The request checked (V2Error when refused; an unknown group is created only once
        the rest passed): one attempt, how long to poll, and what to wait for. The first
        attempt commits `carried` (see _take). `refs`: new
        messages are planned from their consume queue units (QueueRefs: no record read) when
        nothing needs the records to plan, i.e. no tag filter and not a FIFO group; whoever
        answers reads them (AnswerForms)."""
        group = group_name(request.group)
        ctx = self.context
        topic, config = ctx.topic(request.message_queue.topic)
        filt = tag_expression(request.filter_expression)
        st = ctx.settings
        batch = request.batch_size
        if not 0 < batch <= st.max_batch_size:
            raise V2Error(d.BAD_REQUEST, f"batch_size {batch} is not in [1, {st.max_batch_size}]")
        if request.HasField("invisible_duration"):
            invisible = ctx.invisible_ms(request.invisible_duration, "invisible_duration")
        elif request.auto_renew:
            invisible = st.auto_renew_invisible_ms  # push consumers; see the module doc
        else:
            raise V2Error(d.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required "
                                                    "(or auto_renew)")
        poll_ms = duration_ms(request.long_polling_timeout) \
            if request.HasField("long_polling_timeout") else 0
        if not 0 <= poll_ms <= st.max_long_polling_ms:
            raise V2Error(d.ILLEGAL_POLLING_TIME,
                          f"long_polling_timeout {poll_ms} ms is not in [0, {st.max_long_polling_ms}]")
        consumers = self.consumers
        info = await self._group(group)
        if not info.consume_enable:
            raise V2Error(d.FORBIDDEN, f"consumer group {group} may not consume (consumeEnable=false)")
        count = config.read_queue_nums
        if count <= 0 or not config.readable:
            raise V2Error(d.FORBIDDEN, f"topic {topic} is not readable")
        first = request.message_queue.id if 0 <= request.message_queue.id < count else 0
        queues = [(first + i) % count for i in range(count)]
        clock = ctx.clock
        carry = [carried] if carried is not None else []  # for the first attempt only
        refs = refs and not info.fifo and TagFilter.parse(filt).tags is None

        def attempt() -> Attempt[Handout]:
            master = consumers.ensure_loaded()  # the role may change while the call waits
            deliveries, next_expiry = self._take(master, group, info, topic, queues, filt,
                                                 batch, invisible, max_bytes,
                                                 carry.pop() if carry else None, refs)
            wake = None if next_expiry is None else (next_expiry - clock.now_ms()) / 1000.0
            return Attempt(Handout(topic, group, invisible, deliveries), bool(deliveries), wake)

        return attempt, poll_ms / 1000.0, Interest(topic, group, TagFilter.parse(filt).codes,
                                                   batch)


    def _take(self, master, group: str, info, topic: str, queues: list[int], filt: str | None,
              batch: int, invisible_ms: int, max_bytes: int | None = None,
              carried: CarriedAck | None = None, refs: bool = False
              ) -> tuple[list[tuple[int, Delivery]], int | None]:
        """Plans and records the deliveries of one attempt; returns them (queue id, delivery)
        and, for an empty attempt, when a delivery in flight on these queues becomes visible
        again. `carried`: an ack checked here and appended first, in the same append as the
        deliveries (with none, alone); the plans treat its offsets as acked."""
        consumers = self.consumers
        store = consumers.store
        with consumers.lock:
            carried_events = []  # the carried ack's event, applied before the plans' events
            acked: dict[int, set[int]] = {}
            if carried is not None:
                event = carried.check()
                if event is not None:
                    carried_events.append(event)
                    if (carried.group, carried.topic) == (group, topic):
                        acked = carried.acked
            state = consumers.state
            now = self.context.clock.now_ms()
            until = now + invisible_ms
            handles = iter(range(state.next_handle, 2 ** 62))
            events, dead_letters = [], []
            deliveries = []
            room = AnswerRoom(max_bytes)  # what this answer may still carry
            for qid in queues:
                want = batch - len(deliveries)
                if want <= 0 or room.full:
                    break
                q = state.queue(group, topic, qid)
                base = store.min_offset_in_queue(topic, qid) if q is None else 0
                plan = plan_queue(
                    qid, q, base, now, want, fifo=info.fifo,
                    max_attempts=info.max_delivery_attempts, new_handle=lambda: next(handles),
                    read_at=lambda off, qid=qid: record_at(store, topic, qid, off),
                    read_from=lambda off, n, qid=qid: store.get_messages(topic, qid, off, n, filt,
                                                                         decoded=not refs),
                    room=room, acked=acked.get(qid, ()))
                if not plan.changes_state:
                    continue
                key = {"group": group, "topic": topic, "queue": qid}
                events.append({"kind": "pop", **key, "base": base, "until": until,
                               "skip_to": plan.skip_to,
                               "items": [[x.offset, x.attempt, x.handle, x.message_group]
                                         for x in plan.deliveries]})
                for offset, entry, record in plan.dead:
                    dead_letters.append(dead_letter(record, group, entry.attempt))
                    events.append({"kind": "ack", **key, "offset": offset, "handle": entry.handle})
                for offset, entry in plan.vanished:
                    events.append({"kind": "ack", **key, "offset": offset, "handle": entry.handle})
                deliveries += [(qid, x) for x in plan.deliveries]
            if dead_letters:
                consumers.topics.ensure(dlq_topic(group), 1)
            events = carried_events + events
            pending = consumers.commit(master, events, dead_letters) if events else None
            if carried is not None:
                carried.commit(pending if carried_events else None)
            # When the long poll waits for a delivery to become visible again. Only an empty
            # attempt waits, and only these queues can deliver: scanning every in-flight entry
            # of the state on each receive cost O(deliveries in flight) per call.
            next_expiry = None if deliveries else min(
                (i.invisible_until for qid in queues
                 if (qs := state.queue(group, topic, qid)) is not None
                 for i in qs.inflight.values()), default=None)
        return deliveries, next_expiry

    # -- offsets (pull consumers) -------------------------------------------------------------
    def _queue(self, mq: d.MessageQueue) -> tuple[str, int]:
        topic, config = self.context.topic(mq.topic)
        count = max(config.read_queue_nums, config.write_queue_nums)
        if not 0 <= mq.id < count:
            raise V2Error(d.BAD_REQUEST, f"queue {mq.id} of topic {topic} is not in [0, {count})")
        return topic, mq.id

    async def update_offset(self, request: s.UpdateOffsetRequest) -> s.UpdateOffsetResponse:
        group = group_name(request.group)
        topic, qid = self._queue(request.message_queue)
        if request.offset < 0:
            raise V2Error(d.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        high = self.consumers.store.max_offset_in_queue(topic, qid)
        if request.offset > high:
            raise V2Error(d.ILLEGAL_OFFSET, f"offset {request.offset} is beyond the end {high} "
                                            f"of {topic} queue {qid}")
        consumers = self.consumers
        await self._group(group)
        appended = consumers.commit_change([{"kind": "offset", "group": group, "topic": topic,
                                             "queue": qid, "offset": request.offset}])
        return s.UpdateOffsetResponse(status=settled(await appended))

    async def get_offset(self, request: s.GetOffsetRequest) -> s.GetOffsetResponse:
        group = group_name(request.group)
        topic, qid = self._queue(request.message_queue)
        await self.consumers.loaded()
        with self.consumers.lock:
            q = self.consumers.state.queue(group, topic, qid)
            offset = q.committed if q is not None else None
        if offset is None:
            raise V2Error(d.OFFSET_NOT_FOUND, f"group {group} has no offset for {topic} "
                                              f"queue {qid}")
        return s.GetOffsetResponse(status=OK, offset=offset)
