"""The duplicate window: the message ids (UNIQ_KEY) of the client sends stored in the last
`duplicateWindowSeconds`, each with where it was stored, so that a retried send is answered
with the original's receipt instead of being stored again.

Which records are client sends (`sent_as`, decided from the record alone, so that the put path
of a master and reput on every replica enter the same ids):

    record                                           sent to       entered
    a message of a client topic                      its topic     yes
    SCHEDULE_TOPIC_XXXX (a delayed send)              REAL_TOPIC    yes
    RMQ_SYS_TRANS_HALF_TOPIC (a transactional send)   REAL_TOPIC    yes, as a half message
    a half's check copy (TRANSACTION_CHECK_TIMES)     -             no: the checker's copy
    sysFlag COMMIT / ROLLBACK / PREPARED              -             no: a commit carries its
                                                                    half's id, and is not a send
    system, %RETRY% and %DLQ% topics, no UNIQ_KEY     -             no

The first record of an id in the window wins: a later record with the same id that is not a
client's send (the schedule service's delivery of a delayed message, re-put to its real topic
with the same UNIQ_KEY) is not a duplicate and changes nothing. Only when the delayed copy left
the window before its delivery does the delivery take the id (a send of that id afterwards is
answered with the delivery's place: the message with that id, body and topic).

A repeat (`admit`, under the commitlog's put lock, so check and append are one step: of two
concurrent sends of one id exactly one is written) is the same id sent to the same topic with
a body of the same CRC-32, both transactional or both not. The same id with another topic, body
or kind is refused (MessageIllegal "message id": the v2 ILLEGAL_MESSAGE_ID), as is a batch that
holds one id twice; never answered with another message's receipt. Expiry is by store
timestamp against the injected clock.

Fed three ways, always in commitlog order (`fed_to`: everything below it was offered): the
put path enters what it appends (`appended`, under the put lock, right after the write), reput
enters what it dispatches from `fed_to` on (`feed`: a slave's window, and a store's records
that were not its own puts), and a store that opens walks the records of the last window
(store/dedup/rebuild.py), since reput restarts from its checkpoint. A replica that becomes
master dispatches everything it holds first (MessageStore.prepare_for_writes), so its window
holds every id it holds before its first write. A cut of the log (`truncate`) forgets what
lay past it.

Bounded by `duplicateWindowMaxEntries`: at the bound the oldest entries go first, counted in
`evictions`, and `effective_window_ms` says how far back the window still reaches.

Cost: an entry is a tuple (message id, topic, packed place) with the place packed by struct
(`_PLACE`), in a dict by id and a deque in commitlog order. Measured with tracemalloc
(tests/store/test_dedup_window.py prints it): about 180 bytes an entry besides the id string,
which the entry keeps alive (a 34-character id of the official clients: 83 bytes): about
265 bytes an entry, 130 MB at the default bound of 500,000. The tuples hold no containers, so
the garbage collector stops tracking them (a full collection does not walk the window).

Locking: `_lock` guards the entries, the order, `fed_to` and the counters. The put path calls
`admit` and `appended` under the commitlog's put lock (the order of the two locks is always
put lock, then this one); reput calls `feed` and the store calls `truncate` and `caught_up`
under reput's lock. `feed` reads `fed_to` without the lock first: on a master everything reput
dispatches was entered by its puts already, and only reput's own thread (or a truncation under
reput's lock) ever lowers it. Readers of the counters (metrics) take no lock.
"""
from __future__ import annotations

import struct
import threading
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, Sequence

from common.clock import Clock
from store import codec
from store.codec import SysFlag
from store.codec.dispatch import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from store.errors import MessageIllegal
from store.validation import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic

if TYPE_CHECKING:
    from store.codec import EncodedRecord
    from store.codec.dispatch import DispatchRequest
    from store.config import StoreConfig
    from store.put_result import AppendResult

# A client send as a record stores it: (message id, the topic the client sent to, bodyCRC,
# stored as a transaction's half message). A plain tuple: one is built per message put.
SentAs = tuple[str, str, int, bool]
_ID, _TOPIC, _CRC, _HALF = range(4)

# An entry: (message id, topic, place); the place packed: bodyCRC, queue id, queue offset,
# commitlog offset, size, store timestamp, half. 37 bytes in one bytes object instead of seven
# int objects (about 110 bytes less an entry).
_PLACE = struct.Struct("<Iiqqiq?")
_Entry = tuple[str, str, bytes]
_PHY = struct.Struct("<16xq")  # the commitlog offset alone
_TS = struct.Struct("<28xq")  # the store timestamp alone
_PARKED = (SCHEDULE_TOPIC, TRANS_HALF_TOPIC)  # a send parked under another topic (REAL_TOPIC)
_NOT_CLIENT_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
_CLIENT_TOPICS: dict[str, bool] = {}


class Original(NamedTuple):
    """Where a client send was stored: what a repeat of it is answered with."""

    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size: int
    store_timestamp: int

    @property
    def end_offset(self) -> int:
        return self.commit_log_offset + self.size


class WindowStats(NamedTuple):
    """The window's figures for the metrics (read without a lock: approximate)."""

    entries: int
    hits: int  # messages answered with their original's receipt
    refusals: int  # sends refused for reusing an id (other topic, body or kind; twice a batch)
    evictions: int  # entries the bound evicted before their time
    window_ms: int  # duplicateWindowSeconds
    effective_window_ms: int  # how far back every id is still held (window_ms unless evicted)


def client_topic(topic: str) -> bool:
    """A topic a client sends to (not a system, retry or dead-letter topic)."""
    known = _CLIENT_TOPICS.get(topic)
    if known is None:
        known = bool(topic) and not is_system_topic(topic) \
            and not topic.startswith(_NOT_CLIENT_PREFIXES)
        if len(_CLIENT_TOPICS) < 65536:
            _CLIENT_TOPICS[topic] = known
    return known


def sent_as(message_id: str | None, topic: str, sys_flag: int, body_crc: int,
            properties: Mapping[str, str] | str) -> SentAs | None:
    """The client send a record stores, or None (see the module's table). `properties`: the
    record's, as a dict (the put path) or as the stored text (reput); read only for a record
    parked under the schedule or the half topic."""
    if not message_id or sys_flag & SysFlag.TRANSACTION_MASK:
        return None
    half = False
    if topic in _PARKED:
        get = partial(codec.property_value, properties) if isinstance(properties, str) \
            else properties.get
        if topic == TRANS_HALF_TOPIC:
            if get(codec.PROPERTY_TRANSACTION_CHECK_TIMES) is not None:
                return None  # the checker's copy of a half
            half = True
        topic = get(codec.PROPERTY_REAL_TOPIC) or ""
    if not client_topic(topic):
        return None
    return message_id, topic, body_crc, half


def sent_as_request(r: "DispatchRequest") -> SentAs | None:
    """`sent_as` of a dispatched record."""
    return sent_as(r.uniq_key, r.topic, r.sys_flag, r.body_crc, r.properties_text)


class DuplicateWindow:
    """The recent client sends of one store (see the module docstring). Owns the entries (by
    id, and in commitlog order), `fed_to` and the counters, all guarded by `_lock`. Reads
    duplicateWindowSeconds and duplicateWindowMaxEntries from `config` on every call (they
    change at runtime); 0 seconds empties the window and turns it off."""

    def __init__(self, config: Callable[[], "StoreConfig"], clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._order: deque[_Entry] = deque()  # the entries oldest first (some stale: _trim)
        self._topics: dict[str, str] = {}  # one str object per topic for all its entries
        self.fed_to = 0  # every record below it was offered to the window
        self.hits = 0
        self.refusals = 0
        self.evictions = 0
        self._bound_evicted_ts = 0  # store time of the newest entry the bound evicted

    # -- settings ---------------------------------------------------------------------------
    def limits(self) -> tuple[int, int]:
        """(window in ms, most entries); a window of 0 is off."""
        c = self._config()
        return c.duplicate_window_seconds * 1000, c.duplicate_window_max_entries

    @property
    def enabled(self) -> bool:
        return self._config().duplicate_window_seconds > 0

    # -- the put path (under the commitlog's put lock) --------------------------------------
    def admit(self, sent: Sequence[SentAs | None]) -> list[Original | None] | None:
        """For a client's send of these messages: the original of each message that repeats a
        send in the window (None for a new one), or None when none repeats. Raises
        MessageIllegal (nothing may be written) when an id is reused for another topic, body
        or kind, or appears twice in the batch."""
        window_ms, _ = self.limits()
        if not window_ms:
            return None
        cutoff = self._clock.now_ms() - window_ms
        found: list[Original | None] | None = None
        seen: set[str] | None = set() if len(sent) > 1 else None
        with self._lock:
            entries = self._entries
            for i, s in enumerate(sent):
                if s is None:
                    continue
                message_id = s[_ID]
                if seen is not None:
                    if message_id in seen:
                        self.refusals += 1
                        raise MessageIllegal("message id", f"{message_id} appears twice in the "
                                                           f"batch; each message needs its own")
                    seen.add(message_id)
                entry = entries.get(message_id)
                if entry is None:
                    continue
                original = self._repeated(entry, s, cutoff, window_ms)
                if original is not None:
                    if found is None:
                        found = [None] * len(sent)
                    found[i] = original
            if found is not None:
                self.hits += sum(1 for o in found if o is not None)
        return found

    def _repeated(self, entry: _Entry, s: SentAs, cutoff: int, window_ms: int
                  ) -> Original | None:
        crc, queue_id, queue_offset, phy, size, ts, half = _PLACE.unpack(entry[2])
        if ts < cutoff:
            return None  # out of the window: a new send
        what = ""
        if entry[1] != s[_TOPIC]:
            what = f"for topic {entry[1]}, not {s[_TOPIC]}"
        elif crc != s[_CRC]:
            what = f"with another body (body CRC {crc}, this one's {s[_CRC]})"
        elif half != s[_HALF]:
            what = ("as a transactional message; this send is not one" if half else
                    "as a message that is not transactional; this send is one")
        if what:
            self.refusals += 1
            raise MessageIllegal("message id", f"{s[_ID]} was stored {what} within the "
                                               f"duplicate window (duplicateWindowSeconds="
                                               f"{window_ms // 1000}); nothing was written")
        return Original(queue_id, queue_offset, phy, size, ts)

    def appended(self, records: Sequence[tuple["EncodedRecord", str, int]],
                 appends: Sequence["AppendResult"]) -> None:
        """Enter what a put just appended (the records as CommitLog.put_batch took them, and
        where each landed): the put's records that are client sends (`sent_as`, set by the
        put's input while the window is on), first one of an id wins."""
        window_ms, max_entries = self.limits()
        with self._lock:
            if window_ms:
                cutoff = appends[-1].store_timestamp - window_ms
                enter = self._enter
                for (record, _, queue_id), a in zip(records, appends):
                    s = record.sent_as
                    if s is not None:
                        enter(s, queue_id, a.queue_offset, a.wrote_offset, a.wrote_bytes,
                              a.store_timestamp, cutoff)
                self._trim(cutoff, max_entries)
            elif self._entries:
                self._clear()
            self.fed_to = max(self.fed_to, appends[-1].end_offset)

    # -- reput, rebuild, cuts (under reput's lock) ------------------------------------------
    def feed(self, requests: Sequence["DispatchRequest"]) -> None:
        """Enter the client sends among dispatched records, from `fed_to` on (a reput
        listener; the rebuild walk's batches)."""
        if not requests or requests[-1].end_offset <= self.fed_to:
            return  # entered by the puts that wrote them (a master's own records)
        window_ms, max_entries = self.limits()
        with self._lock:
            fed_to = self.fed_to
            if window_ms:
                cutoff = self._clock.now_ms() - window_ms
                enter = self._enter
                for r in requests:
                    if r.commit_log_offset < fed_to or not r.uniq_key:
                        continue
                    s = sent_as_request(r)
                    if s is not None:
                        enter(s, r.queue_id, r.consume_queue_offset, r.commit_log_offset,
                              r.msg_size, r.store_timestamp, cutoff)
                self._trim(cutoff, max_entries)
            elif self._entries:
                self._clear()
            self.fed_to = max(fed_to, requests[-1].end_offset)

    def caught_up(self, offset: int) -> None:
        """Every record below `offset` was offered (the rebuild walk's end; a new master's
        dispatched end): reput's records below it are entered already."""
        with self._lock:
            self.fed_to = max(self.fed_to, offset)

    def truncate(self, offset: int) -> None:
        """The log was cut at `offset`: forget the entries at or past it."""
        with self._lock:
            order, entries = self._order, self._entries
            while order and _PHY.unpack_from(order[-1][2])[0] >= offset:
                entry = order.pop()
                if entries.get(entry[0]) is entry:
                    del entries[entry[0]]
            self.fed_to = min(self.fed_to, offset)

    # -- reading ----------------------------------------------------------------------------
    def get(self, message_id: str) -> Original | None:
        """Where the send of `message_id` in the window was stored (expired or not yet
        trimmed ones included), or None."""
        entry = self._entries.get(message_id)
        if entry is None:
            return None
        _, queue_id, queue_offset, phy, size, ts, _ = _PLACE.unpack(entry[2])
        return Original(queue_id, queue_offset, phy, size, ts)

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> WindowStats:
        window_ms, _ = self.limits()
        effective = window_ms
        if self._bound_evicted_ts:
            effective = max(0, min(window_ms, self._clock.now_ms() - self._bound_evicted_ts))
        return WindowStats(len(self._entries), self.hits, self.refusals, self.evictions,
                           window_ms, effective)

    # -- internals (under _lock) ------------------------------------------------------------
    def _enter(self, s: SentAs, queue_id: int, queue_offset: int, phy: int, size: int, ts: int,
               cutoff: int) -> None:
        if ts < cutoff:
            return  # older than the window (a rebuild's first records)
        message_id = s[_ID]
        held = self._entries.get(message_id)
        if held is not None and _TS.unpack_from(held[2])[0] >= cutoff:
            return  # the first record of an id wins (a delayed message's delivery, ...)
        topic = s[_TOPIC]
        topic = self._topics.get(topic) or self._intern(topic)
        entry = (message_id, topic, _PLACE.pack(s[_CRC], queue_id, queue_offset, phy, size, ts,
                                                s[_HALF]))
        self._entries[message_id] = entry
        self._order.append(entry)

    def _intern(self, topic: str) -> str:
        if len(self._topics) < 65536:
            self._topics[topic] = topic
        return topic

    def _trim(self, cutoff: int, max_entries: int) -> None:
        """Drop the oldest entries while they are out of the window or past the bound."""
        order, entries = self._order, self._entries
        while order:
            entry = order[0]
            if entries.get(entry[0]) is not entry:
                order.popleft()  # replaced (the id came back after it expired) or cut
                continue
            ts = _TS.unpack_from(entry[2])[0]
            if ts >= cutoff:
                if len(entries) <= max_entries:
                    return
                self.evictions += 1
                self._bound_evicted_ts = max(self._bound_evicted_ts, ts)
            order.popleft()
            del entries[entry[0]]

    def _clear(self) -> None:
        self._entries.clear()
        self._order.clear()
        self._topics.clear()

