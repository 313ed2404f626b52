"""Messages over the Admin API: store records <-> admin Messages, and QueryMessages' three
lookups (by message id, by key, by store time).

By message id: an operator holds either an offset message id (what a RocketMQ 4 send result and
every record's `msg_id` show: store host + commitlog offset) or a client message id (UNIQ_KEY,
what RocketMQ 5 clients show). Both are 32 hex digits for IPv4, so the id is tried as both: as
an offset id it must decode to a record whose own offset id is the same (a random offset is not
a record boundary, and the store host must match); as a UNIQ_KEY it is looked up in the index of
the given topic or of every topic of the node (the index is keyed by topic#key).

By time: each queue's first offset stored at or after `begin` (binary search of the consume
queue), then reading forward until `end`; queues are merged by store time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from proto import admin_pb2 as pb
from store import codec
from store.codec import Message, MessageRecord
from store.errors import MessageIllegal

from cluster.admin.admin_error import invalid

if TYPE_CHECKING:
    from store.get_result import GetMessageResult
    from store.queue.consume_queue import ConsumeQueue

    from cluster.admin.admin_node import AdminNode

class MessageSource(Protocol):
    """What the lookups read: a node's MessageStore, or an archived group (ArchiveGroup)."""

    def consume_queues(self) -> list["ConsumeQueue"]: ...
    def get_messages(self, topic: str, queue_id: int, offset: int,
                     max_count: int = 32) -> "GetMessageResult": ...
    def look_message_by_offset(self, offset: int) -> MessageRecord | None: ...
    def query_messages(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                       end_ms: int = 2 ** 62) -> list[MessageRecord]: ...
    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...
    def min_phy_offset(self) -> int: ...
    def max_phy_offset(self) -> int: ...


DEFAULT_MAX = 32
MAX_QUERY = 1024
_READ_BATCH = 64
_INDEX_SLACK = 256  # extra index hits asked for when a time range is widened to whole seconds


def to_store_message(m: pb.Message, born_host: str) -> Message:
    props = dict(m.properties)
    if m.tags:
        props[codec.PROPERTY_TAGS] = m.tags
    if m.keys:
        props[codec.PROPERTY_KEYS] = m.keys
    if m.unique_key:
        props[codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = m.unique_key
    return Message(topic=m.topic, body=m.body, queue_id=m.queue_id, properties=props,
                   born_timestamp=m.born_timestamp, born_host=born_host)


def from_record(r: MessageRecord, with_body: bool = True) -> pb.Message:
    ip, port = codec.parse_host(r.store_host)
    return pb.Message(topic=r.topic, queue_id=r.queue_id, tags=r.tags or "",
                      keys=" ".join(r.keys), body=r.body if with_body else b"",
                      properties=r.properties,
                      msg_id=codec.offset_msg_id(ip, port, r.physical_offset),
                      queue_offset=r.queue_offset, commit_log_offset=r.physical_offset,
                      store_timestamp=r.store_timestamp, born_timestamp=r.born_timestamp,
                      unique_key=r.uniq_key or "", body_size=len(r.body), born_host=r.born_host,
                      store_host=r.store_host, reconsume_times=r.reconsume_times,
                      sys_flag=r.sys_flag, body_crc=r.body_crc)


def request_from_params(params: dict[str, str]) -> pb.QueryMessagesRequest:
    """A QueryMessagesRequest from HTTP query parameters (topic, key, id, begin, end, max,
    queue_id, omit_body): the console's and the archive's HTTP lookups. `lookup` checks what
    the lookup needs; only the numbers are checked here."""
    def number(name: str) -> int:
        text = params.get(name, "") or "0"
        try:
            return int(text)
        except ValueError:
            raise invalid(f"{name}={text!r}: want an integer") from None

    req = pb.QueryMessagesRequest(topic=params.get("topic", ""), key=params.get("key", ""),
                                  msg_id=params.get("id", "") or params.get("msg_id", ""),
                                  max_count=number("max"), begin_timestamp_ms=number("begin"),
                                  end_timestamp_ms=number("end"),
                                  omit_body=params.get("omit_body", "") in ("1", "true"))
    if "queue_id" in params:
        req.queue_id = number("queue_id")
    return req


def query(node: "AdminNode", req: pb.QueryMessagesRequest) -> pb.GetMessagesResponse:
    """The QueryMessages lookups on a node's store."""
    return lookup(node.store, req, lambda: _all_topics(node))


def lookup(store: "MessageSource", req: pb.QueryMessagesRequest,
           all_topics: Callable[[], list[str]]) -> pb.GetMessagesResponse:
    """The QueryMessages lookups on a store (a node's, or an archived group's:
    cluster/archive/archive_group.py); INVALID_ARGUMENT (AdminError) for a request that names
    none or lacks what its lookup needs. `all_topics` lists the topics an id lookup without a
    topic searches."""
    if req.max_count < 0 or req.max_count > MAX_QUERY:
        raise invalid(f"max_count {req.max_count} is out of range 0..{MAX_QUERY}")
    limit = req.max_count or DEFAULT_MAX
    begin, end = req.begin_timestamp_ms, req.end_timestamp_ms or 2 ** 62
    if begin < 0 or end < 0 or begin > end:
        raise invalid(f"bad time range [{req.begin_timestamp_ms}, {req.end_timestamp_ms}]")
    has_range = bool(req.begin_timestamp_ms or req.end_timestamp_ms)
    if req.HasField("queue_id") and (req.msg_id or req.key or not has_range):
        raise invalid("queue_id applies to time range lookups only")
    truncated = False
    if req.msg_id:
        if req.key:
            raise invalid("give msg_id or key, not both")
        topics = [req.topic] if req.topic else all_topics()
        records = by_id(store, req.msg_id.strip(), topics, limit)
    elif req.key:
        if not req.topic:
            raise invalid("a key lookup needs the topic (the index is keyed by topic and key)")
        records = by_key(store, req.topic, req.key, limit, begin, end)
    elif has_range:
        if not req.topic:
            raise invalid("a time range lookup needs the topic")
        if req.HasField("queue_id") and req.queue_id < 0:
            raise invalid(f"queue_id {req.queue_id} is negative")
        queue_ids = ([req.queue_id] if req.HasField("queue_id")
                     else sorted(cq.queue_id for cq in store.consume_queues()
                                 if cq.topic == req.topic))
        records, truncated = by_time(store, req.topic, queue_ids, begin, end, limit)
    else:
        raise invalid("give msg_id, key (with topic) or a time range (with topic)")
    return pb.GetMessagesResponse(status="FOUND" if records else "NO_MATCHED_MESSAGE",
                                  truncated=truncated,
                                  messages=[from_record(r, not req.omit_body) for r in records])


def by_key(store: "MessageSource", topic: str, key: str, limit: int, begin: int,
           end: int) -> list[MessageRecord]:
    """Newest first. The store widens the index's whole-second window and filters on each
    record's exact store time (store/reader.py); ask for some extra in case the widened window
    brought entries from just outside the range."""
    if begin <= 0:
        return store.query_messages(topic, key, limit, 0, end)
    return store.query_messages(topic, key, limit + _INDEX_SLACK, begin, end)[:limit]


def by_id(store: "MessageSource", msg_id: str, topics: Iterable[str],
          limit: int) -> list[MessageRecord]:
    found: dict[int, MessageRecord] = {}
    record = _by_offset_id(store, msg_id)
    if record is not None:
        found[record.physical_offset] = record
    for t in topics:
        for r in store.query_messages(t, msg_id, limit):
            if r.uniq_key == msg_id:  # not a KEYS match: an id lookup wants the id
                found.setdefault(r.physical_offset, r)
    return sorted(found.values(), key=lambda r: (r.store_timestamp, r.physical_offset))[:limit]


def _by_offset_id(store: "MessageSource", msg_id: str) -> MessageRecord | None:
    try:
        _, _, offset = codec.decode_offset_msg_id(msg_id)
    except MessageIllegal:
        return None
    if not store.min_phy_offset() <= offset < store.max_phy_offset():
        return None
    record = store.look_message_by_offset(offset)
    if record is None or record.msg_id != msg_id.upper():
        return None
    return record


def _all_topics(node: "AdminNode") -> list[str]:
    names = {cq.topic for cq in node.store.consume_queues()}
    names.update(c.topic_name for c in node.topics.all())
    return sorted(names)


def by_time(store: "MessageSource", topic: str, queue_ids: Iterable[int], begin: int, end: int,
            limit: int) -> tuple[list[MessageRecord], bool]:
    """Up to `limit` messages of `topic` stored in [begin, end], oldest first; and whether more
    matched. Each queue contributes at most limit + 1 records, enough for the merged first
    `limit` and for knowing there are more."""
    merged: list[MessageRecord] = []
    for qid in queue_ids:
        merged += _queue_range(store, topic, qid, begin, end, limit + 1)
    merged.sort(key=lambda r: (r.store_timestamp, r.physical_offset))
    return merged[:limit], len(merged) > limit


def _queue_range(store: "MessageSource", topic: str, queue_id: int, begin: int, end: int,
                 want: int) -> list[MessageRecord]:
    out: list[MessageRecord] = []
    # A queue whose start retention moved answers OFFSET_TOO_SMALL with its min offset as the
    # next offset, so the loop below simply continues from there.
    offset = store.offset_for_timestamp(topic, queue_id, begin)
    while len(out) < want:
        r = store.get_messages(topic, queue_id, offset, min(_READ_BATCH, want - len(out)))
        for m in r.messages:
            if m.store_timestamp > end:
                return out
            if m.store_timestamp >= begin:
                out.append(m)
        if r.next_begin_offset <= offset:  # the end of the queue
            break
        offset = r.next_begin_offset
    return out
