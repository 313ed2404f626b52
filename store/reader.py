"""Reading messages back: by queue offset (pull) with tag filter and limits, by physical offset,
by offset message id, by key / unique key through the index, and queue offsets by time."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from . import codec
from .codec import MessageRecord
from .commitlog.commitlog import CommitLog
from .commitlog.commitlog_walk import CommitLogWalk
from .errors import OffsetOutOfRange
from .get_result import GetMessageResult, GetStatus, QueueRef


@dataclass(frozen=True)
class TagFilter:
    """A subscription's tags: None means every message ('*')."""

    tags: frozenset[str] | None = None

    @classmethod
    def parse(cls, expression: str | None) -> "TagFilter":
        """'*' / '' / None -> all; 'a||b' -> {a, b}."""
        if expression is None or expression.strip() in ("", "*"):
            return cls(None)
        tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
        if not tags:
            raise ValueError(f"bad tag expression {expression!r}")
        return cls(tags)

    @property
    def codes(self) -> frozenset[int] | None:
        return None if self.tags is None else frozenset(codec.java_string_hash(t) for t in self.tags)

    def matches(self, record: MessageRecord) -> bool:
        return self.tags is None or (record.tags in self.tags)


class MessageReader:
    """The store's read side: pulls a queue's messages (with tag filter and the store's count
    and byte limits), looks records up by offset, offset message id and key, finds queue
    offsets by time and walks the commitlog. Owns no state beyond those limits.

    No lock, called from any thread: it reads files under the commitlog's and the consume
    queues' own hold()/release(), and a record whose file retention removed meanwhile reads
    as gone."""

    def __init__(self, commitlog: CommitLog, cq_store, index_service, *,
                 max_bytes: int, max_count: int) -> None:
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.max_bytes = max_bytes
        self.max_count = max_count

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     tag_filter: TagFilter = TagFilter(), max_bytes: int | None = None,
                     max_physical_offset: int | None = None, *,
                     decoded: bool = True) -> GetMessageResult:
        """Messages of one queue from `offset` (RocketMQ DefaultMessageStore.getMessage).
        `decoded` False: the consume queue's QueueRefs of the same messages, no record read
        (for a reader that has them read elsewhere: the conversion process); only without
        tags to filter on, which the records would have to be read for."""
        if not decoded and tag_filter.tags is not None:
            raise ValueError("a tag filter needs the records: decoded=False takes none")
        cq = self.cq_store.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_off, max_off = cq.min_offset(), cq.max_offset()
        if max_off == 0:
            return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off)
        if offset < min_off:
            return GetMessageResult(GetStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off)
        if offset == max_off:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off)
        if offset > max_off:
            return GetMessageResult(GetStatus.OFFSET_OVERFLOW_BADLY, max_off, min_off, max_off)
        max_count = max(1, min(max_count, self.max_count))
        max_bytes = max_bytes or self.max_bytes
        codes = tag_filter.codes
        commit_min = self.commitlog.min_offset()
        result = GetMessageResult(GetStatus.NO_MATCHED_MESSAGE, offset, min_off, max_off)
        next_offset = offset
        removing = False
        with self.commitlog.records() as records:  # a queue's run is mostly in one file
            for index, phy, size, tcode in cq.iter_units(offset, max(max_count * 4, 64)):
                next_offset = index + 1
                if max_physical_offset is not None and phy + size > max_physical_offset:
                    next_offset = index
                    break
                if phy < commit_min:
                    removing = True
                    continue
                if codes is not None and tcode not in codes:
                    continue
                if decoded:
                    record = _record_at(records, phy, size)
                    if not isinstance(record, MessageRecord) or not tag_filter.matches(record):
                        continue
                else:
                    record = QueueRef(index, phy, size)
                if result.messages and result.buffer_total_size + size > max_bytes:
                    next_offset = index
                    break
                result.messages.append(record)
                result.buffer_total_size += size
                if len(result.messages) >= max_count:
                    break
        result.next_begin_offset = next_offset
        if result.messages:
            result.status = GetStatus.FOUND
        elif removing:
            result.status = GetStatus.MESSAGE_WAS_REMOVING
        return result

    def look_message_by_offset(self, phy: int, size: int | None = None) -> MessageRecord | None:
        with self.commitlog.records() as records:
            decoded = _record_at(records, phy, size)
        return decoded if isinstance(decoded, MessageRecord) else None

    def look_message_by_id(self, msg_id: str) -> MessageRecord | None:
        """By offset message id (store host + physical offset)."""
        _, _, offset = codec.decode_offset_msg_id(msg_id)
        return self.look_message_by_offset(offset)

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                     end_ms: int = 2 ** 62) -> list[MessageRecord]:
        """Messages whose UNIQ_KEY or one of whose KEYS equals `key`, newest first."""
        if self.index_service is None:
            return []
        # The index keeps whole seconds (RocketMQ's timeDiff): widen its window by a second on
        # both sides and filter on each record's exact store time below.
        offsets = self.index_service.query(topic, key, max_num, max(0, begin_ms - 1000),
                                           end_ms + 1000)
        out: list[MessageRecord] = []
        for phy in offsets:
            rec = self.look_message_by_offset(phy)
            if rec is None or rec.topic != topic:
                continue
            if key != rec.uniq_key and key not in rec.keys:
                continue  # a hash collision in the index
            if begin_ms <= rec.store_timestamp <= end_ms:
                out.append(rec)
        return out

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.cq_store.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_for_timestamp(timestamp_ms, self.commitlog.store_time_of)

    def iter_records(self, start: int = 0, end: int | None = None,
                     check_crc: bool = False) -> Iterable[tuple[int, codec.DecodeResult]]:
        """Every record of the commitlog from `start` (a record boundary) up to `end` (default
        the readable end): (offset, record); where the records stop before `end` because the
        bytes there are not a record, last (offset, what lies there: Empty, NeedMore, Corrupt)."""
        end = self.commitlog.max_offset() if end is None else end
        walk = CommitLogWalk(decode=record_decoder(check_crc))
        records = walk.mapped(self.commitlog.queue, max(start, self.commitlog.min_offset()), end)
        try:
            for offset, (_, record) in records:
                yield offset, record
        finally:
            records.close()
        if walk.stop is not None and walk.stop.in_data:
            try:
                yield walk.offset, self.commitlog.get_message(walk.offset, end - walk.offset,
                                                              check_crc=check_crc)
            except OffsetOutOfRange:  # the file went away meanwhile
                return


def _record_at(records, phy: int, size: int | None) -> codec.DecodeResult | None:
    """What lies at `phy` (a run's reader: CommitLog.records()), None when no file holds it
    any more (retention) or yet."""
    try:
        return records.get(phy, size)
    except OffsetOutOfRange:
        return None


def record_decoder(check_crc: bool) -> Callable[[Any, int, int], tuple[int, MessageRecord] | None]:
    """codec.decode in the walk's form: (totalSize, record), None for anything else."""
    def decode(view: Any, pos: int, limit: int) -> tuple[int, MessageRecord] | None:
        res = codec.decode(view, pos, limit, check_crc=check_crc)
        return (res.total_size, res) if isinstance(res, MessageRecord) else None
    return decode
