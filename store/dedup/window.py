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
timestamp against the injected clock (an entry's store time is clamped to never go below the
previous entry's, so what expired is always the oldest entries, found by binary search).

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

Cost: an entry is the message id -> its place packed by struct (`_PLACE`, one bytes object),
and the id once more in the order (a reference in a tuple of 1,024). Measured with tracemalloc
(tests/store/test_dedup_window.py prints it): about 120 bytes an entry besides the id string,
which the entry keeps alive (a 34-character id of the official clients: 83 bytes): about 205
bytes an entry, 100 MB at the default bound of 500,000. Neither the dict (str -> bytes) nor
the sealed runs (tuples of str) are tracked by the garbage collector, so a full collection of
the node does not read the window (with a tuple per entry it did: 30 ms more per full
collection at 150,000 entries, 2 µs a message). CPU: the put path looks a batch's ids up,
enters them and lets the oldest go with bulk dict operations (C loops); what stays per message
in Python is classifying it and packing its place. A lookup in a dict of hundreds of
thousands of entries is a cache miss or two (0.3-0.5 µs on this host). In all about 2.3-2.9 µs
a message of the master's 22 on a quiet host, 0.90-0.92x of the put path without the window
(tests/perf/bench_messaging.py --window-rounds; docs/performance/benchmarks.md has the profile:
holding that many ids costs about as much however pure Python holds them).

Locking: `_lock` guards the entries, the order, the topics, `fed_to` and the counters. The put
path calls `admit` and `appended` under the commitlog's put lock (the order of the two locks is
always put lock, then this one); reput calls `feed`, and the store `truncate` and `caught_up`
(prepare_for_writes), under reput's lock; a store's load calls `feed_walked` and `caught_up`
before any of its threads run. `feed` reads `fed_to` without the lock first: on a master
everything reput dispatches was entered by its puts already (a stale, lower value only sends
it the slow way), and only reput's own thread or a truncation under reput's lock lowers it.
Readers of the counters (metrics) take no lock.
"""
from __future__ import annotations

import struct
import threading
from bisect import bisect_left
from collections import deque
from functools import partial
from itertools import accumulate
from sys import intern as _intern
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

# An entry: message id -> its place, packed: bodyCRC, queue id, queue offset, commitlog offset,
# size, entered at, topic (an index into the window's topics), half. One bytes object (80
# bytes allocated) instead of a tuple of objects: a dict of str -> bytes is never tracked by
# the garbage collector, so a full collection does not read 500,000 entries' headers (a tuple
# per entry cost every full collection of a node a cache miss per entry: 30 ms more at 150,000
# entries). "Entered at" is the record's store time, or the previous entry's when that is later
# (a new master whose clock is behind its predecessor's): it never decreases in commitlog
# order, so what expired is a prefix of the order, found by binary search.
_PLACE = struct.Struct("<IiqqiqI?")
_PHY = struct.Struct("<16xq")  # the commitlog offset alone
_AT = struct.Struct("<28xq")  # entered at, alone
_RUN = 1024  # ids per sealed run of the order (a tuple: one object for the collector to see)


# a send parked under another topic (its REAL_TOPIC)
_PARKED_TOPICS = frozenset((SCHEDULE_TOPIC, TRANS_HALF_TOPIC))
_NOT_CLIENT_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
_PARKED, _UNKNOWN = object(), object()
# topic -> what a record of it is (_sender_topic); grows with the topics seen, at most 65,536
_SENDER_TOPICS: dict[str, object] = {}
_TRANSACTION_MASK = SysFlag.TRANSACTION_MASK


class Original(NamedTuple):
    """Where a client send was stored: what a repeat of it is answered with."""

    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size: int
    store_timestamp: int  # as the window entered it (see _PLACE)

    @property
    def end_offset(self) -> int:
        return self.commit_log_offset + self.size


class Admission(NamedTuple):
    """What `admit` found for a client's send: its records' ids (those with a `sent_as`, in
    order) and each record's original, or None when no record repeats a send."""

    ids: list[str]
    originals: "list[Original | None] | None"


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
    return bool(topic) and not is_system_topic(topic) and not topic.startswith(
        _NOT_CLIENT_PREFIXES)


def _sender_topic(topic: str) -> object:
    """What `_SENDER_TOPICS` holds for `topic`: the topic itself (interned: one str object per
    topic for all its entries) when clients send to it, _PARKED for the schedule and the half
    topic, else None."""
    kind = _PARKED if topic in _PARKED_TOPICS else _intern(topic) if client_topic(topic) else None
    if len(_SENDER_TOPICS) < 65536:
        _SENDER_TOPICS[topic] = kind
    return kind


def sent_as(message_id: str | None, topic: str, sys_flag: int, body_crc: int,
            properties: Mapping[str, str] | str) -> SentAs | None:
    """The client send a record stores, or None (see the module's table). `properties`: the
    record's, as a dict (the put path) or as the stored text (reput); read only for a record
    parked under the schedule or the half topic. Called for every message put while the
    window is on: the usual case (a client topic) is one dict lookup."""
    if not message_id or sys_flag & _TRANSACTION_MASK:
        return None
    kind = _SENDER_TOPICS.get(topic, _UNKNOWN)
    if kind is _UNKNOWN:
        kind = _sender_topic(topic)
    if kind is None:
        return None
    if kind is not _PARKED:
        return message_id, kind, body_crc, False  # type: ignore[return-value]
    get = partial(codec.property_value, properties) if isinstance(properties, str) \
        else properties.get
    half = topic == TRANS_HALF_TOPIC
    if half and get(codec.PROPERTY_TRANSACTION_CHECK_TIMES) is not None:
        return None  # the checker's copy of a half
    real = get(codec.PROPERTY_REAL_TOPIC) or ""
    kind = _SENDER_TOPICS.get(real, _UNKNOWN)
    if kind is _UNKNOWN:
        kind = _sender_topic(real)
    if kind is None or kind is _PARKED:
        return None
    return message_id, kind, body_crc, half  # type: ignore[return-value]


def sent_as_request(r: "DispatchRequest") -> SentAs | None:
    """`sent_as` of a dispatched record."""
    return sent_as(r.uniq_key, r.topic, r.sys_flag, r.body_crc, r.properties_text)


class DuplicateWindow:
    """The recent client sends of one store (see the module docstring). Owns the entries by
    id (`_entries`, message id -> packed place), their ids in commitlog order (`_runs`: sealed
    tuples of ids, the first from `_head` on, then `_tail`: always exactly the dict's keys),
    the topics the places name, `fed_to` and the counters, all guarded by `_lock`. Reads
    duplicateWindowSeconds and duplicateWindowMaxEntries from `config` on every call (they
    change at runtime); 0 seconds empties the window and turns it off."""

    def __init__(self, config: Callable[[], "StoreConfig"], clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, bytes] = {}
        self._runs: deque[tuple[str, ...]] = deque()
        self._head = 0  # ids of the first run (or of the tail, without runs) that left
        self._tail: list[str] = []  # ids entered since the last sealed run
        self._topics: list[str] = []  # the places' topic indexes name these
        self._topic_index: dict[str, int] = {}
        self._last_at = 0  # entered-at of the newest entry
        self.fed_to = 0  # every record below it was offered to the window
        self.hits = 0
        self.refusals = 0
        self.evictions = 0
        self._bound_evicted_at = 0  # entered-at of the newest entry the bound evicted

    # -- settings ---------------------------------------------------------------------------
    def limits(self) -> tuple[int, int]:
        """(window in ms, most entries); a window of 0 is off."""
        c = self._config()
        return c.duplicate_window_seconds * 1000, c.duplicate_window_max_entries

    @property
    def enabled(self) -> bool:
        return self._config().duplicate_window_seconds > 0

    # -- the put path (under the commitlog's put lock) --------------------------------------
    def admit(self, records: Sequence[tuple["EncodedRecord", str, int]]) -> "Admission | None":
        """For a client's send of these records (as CommitLog.put_batch takes them): their
        ids and, where a record repeats a send in the window, its original (`originals`, None
        when none repeats); None while the window is off. Raises MessageIllegal (nothing may
        be written) when an id is reused for another topic, body or kind, or appears twice in
        the batch. The admission goes back to `appended` with the records it admitted."""
        window_ms, _ = self.limits()
        if not window_ms:
            return None
        ids = [s[_ID] for r, _, _ in records if (s := r.sent_as) is not None]
        unique = set(ids)
        if len(unique) < len(ids):
            self._twice(ids)
        with self._lock:
            if not self._entries.keys() & unique:  # the usual case, looked up in C
                return Admission(ids, None)
            return Admission(ids, self._repeats([r.sent_as for r, _, _ in records],
                                                self._clock.now_ms() - window_ms, window_ms))

    def _twice(self, ids: list[str]) -> None:
        seen: set[str] = set()
        for message_id in ids:
            if message_id in seen:
                self.refusals += 1
                raise MessageIllegal("message id", f"{message_id} appears twice in the batch; "
                                                   f"each message needs its own")
            seen.add(message_id)

    def _repeats(self, sent: Sequence[SentAs | None], cutoff: int, window_ms: int
                 ) -> list[Original | None] | None:
        """admit's answer when some ids are held (under _lock)."""
        found: list[Original | None] = [None] * len(sent)
        entries = self._entries
        for i, s in enumerate(sent):
            place = entries.get(s[_ID]) if s is not None else None
            if place is not None:
                found[i] = self._repeated(place, s, cutoff, window_ms)  # type: ignore[arg-type]
        hits = len(sent) - found.count(None)
        self.hits += hits
        return found if hits else None

    def _repeated(self, place: bytes, s: SentAs, cutoff: int, window_ms: int
                  ) -> Original | None:
        crc, queue_id, queue_offset, phy, size, at, topic_index, half = _PLACE.unpack(place)
        if at < cutoff:
            return None  # out of the window: a new send
        topic = self._topics[topic_index]
        what = ""
        if topic != s[_TOPIC]:
            what = f"for topic {topic}, not {s[_TOPIC]}"
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
        return Original(queue_id, queue_offset, phy, size, at)

    def appended(self, records: Sequence[tuple["EncodedRecord", str, int]],
                 appends: Sequence["AppendResult"], admission: "Admission | None" = None
                 ) -> None:
        """Enter what a put just appended (the records as CommitLog.put_batch took them, and
        where each landed): the put's records that are client sends (`sent_as`, set by the
        put's input while the window is on), the first record of an id winning. `admission`:
        what `admit` said of exactly these records (none repeats), so unless reput entered
        some of them meanwhile (it moved `fed_to` into them) they go in without another look
        (a lookup in a large dict is a cache miss or two: about 0.3 µs here)."""
        window_ms, max_entries = self.limits()
        with self._lock:
            if window_ms:
                # one store time for the whole put (CommitLog.put_batch)
                at = max(appends[-1].store_timestamp, self._last_at)
                self._expire(at - window_ms)  # an id that expired leaves before it returns
                sends = [(s, queue_id, a) for (record, _, queue_id), a in zip(records, appends)
                         if (s := record.sent_as) is not None]
                if sends:
                    topics = self._topics_of(*{s[_TOPIC] for s, _, _ in sends})
                    pack = _PLACE.pack
                    places = [pack(s[_CRC], queue_id, a.queue_offset, a.wrote_offset,
                                   a.wrote_bytes, at, topics[s[_TOPIC]], s[_HALF])
                              for s, queue_id, a in sends]
                    if admission is not None and self.fed_to <= appends[0].wrote_offset:
                        self._add(admission.ids, places, unheld=True)
                    else:
                        self._add([s[_ID] for s, _, _ in sends], places)
                    self._last_at = at
                self._bound(max_entries)
            elif self._entries:
                self._clear()
            self.fed_to = max(self.fed_to, appends[-1].end_offset)

    # -- reput, rebuild, cuts (under reput's lock) ------------------------------------------
    def feed(self, requests: Sequence["DispatchRequest"]) -> None:
        """Enter the client sends among dispatched records, from `fed_to` on (a reput
        listener)."""
        if not requests or requests[-1].end_offset <= self.fed_to:
            return  # entered by the puts that wrote them (a master's own records)
        self._feed([(s, r.queue_id, r.consume_queue_offset, r.commit_log_offset, r.msg_size,
                     r.store_timestamp) for r in requests
                    if r.uniq_key and (s := sent_as_request(r)) is not None],
                   requests[-1].end_offset)

    def feed_walked(self, records: Sequence[tuple[int, tuple]], end: int) -> None:
        """Enter the client sends among records of a commitlog walk with the dispatch decode
        ((offset, codec.dispatch_fields' tuple): the rebuild's), up to `end`. Only UNIQ_KEY
        is looked up in each record's properties (a DispatchRequest looks up three)."""
        uniq = codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        value = codec.property_value
        self._feed([(s, f[1], f[2], phy, f[0], f[4]) for phy, f in records
                    if f[7] and (s := sent_as(value(f[7], uniq), f[6], f[3], f[8], f[7]))],
                   end)

    def _feed(self, sends: list[tuple[SentAs, int, int, int, int, int]], end: int) -> None:
        """Enter `sends` ((sent as, queue id, queue offset, commitlog offset, size, store
        time), in commitlog order) from `fed_to` on, and move `fed_to` to `end`."""
        window_ms, max_entries = self.limits()
        with self._lock:
            fed_to = self.fed_to
            if window_ms:
                cutoff = self._clock.now_ms() - window_ms
                self._expire(cutoff)
                sends = [x for x in sends if x[3] >= fed_to and x[5] >= cutoff]
                if sends:
                    ats = list(accumulate((x[5] for x in sends), max, initial=self._last_at))[1:]
                    topics = self._topics_of(*{x[0][_TOPIC] for x in sends})
                    pack = _PLACE.pack
                    self._add([x[0][_ID] for x in sends],
                              [pack(s[_CRC], queue_id, queue_offset, phy, size, at,
                                    topics[s[_TOPIC]], s[_HALF])
                               for (s, queue_id, queue_offset, phy, size, _), at
                               in zip(sends, ats)])
                    self._last_at = ats[-1]
                self._bound(max_entries)
            elif self._entries:
                self._clear()
            self.fed_to = max(fed_to, end)

    def caught_up(self, offset: int) -> None:
        """Every record below `offset` was offered (the rebuild walk's end; a new master's
        dispatched end): reput's records below it are entered already."""
        with self._lock:
            self.fed_to = max(self.fed_to, offset)

    def truncate(self, offset: int) -> None:
        """The log was cut at `offset`: forget the entries at or past it (the newest)."""
        with self._lock:
            entries = self._entries
            ids = self._live_ids()
            keep = len(ids)
            while keep and _PHY.unpack_from(entries[ids[keep - 1]])[0] >= offset:
                keep -= 1
            if keep < len(ids):
                deque(map(entries.__delitem__, ids[keep:]), 0)
                self._runs.clear()
                self._head = 0
                self._tail = []
                self._append_ids(ids[:keep])
            self.fed_to = min(self.fed_to, offset)

    # -- reading ----------------------------------------------------------------------------
    def get(self, message_id: str) -> Original | None:
        """Where the send of `message_id` in the window was stored (an expired one that has
        not left yet included), or None."""
        place = self._entries.get(message_id)
        if place is None:
            return None
        _, queue_id, queue_offset, phy, size, at, _, _ = _PLACE.unpack(place)
        return Original(queue_id, queue_offset, phy, size, at)

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> WindowStats:
        window_ms, _ = self.limits()
        effective = window_ms
        if self._bound_evicted_at:
            effective = max(0, min(window_ms, self._clock.now_ms() - self._bound_evicted_at))
        return WindowStats(len(self._entries), self.hits, self.refusals, self.evictions,
                           window_ms, effective)

    # -- internals (under _lock) ------------------------------------------------------------
    def _topics_of(self, *topics: str) -> dict[str, int]:
        """The topic index (topic -> its number in the places), holding `topics`."""
        index = self._topic_index
        for topic in topics:
            if topic not in index:
                index[topic] = len(self._topics)
                self._topics.append(topic)
        return index

    def _add(self, ids: list[str], places: list[bytes], unheld: bool = False) -> None:
        """Enter `ids` with their places (in commitlog order, none entered before the newest
        entry). The first record of an id wins: one held (live: `_expire` ran first) or
        earlier in `ids` keeps it; `unheld`: the caller knows none is (admitted, distinct)."""
        entries = self._entries
        if not unheld:
            distinct = set(ids)
            unheld = len(distinct) == len(ids) and not entries.keys() & distinct
        if unheld:  # the usual case, in C
            entries.update(zip(ids, places))
        else:  # a delayed message's delivery; reput ahead of the put
            kept = []
            for message_id, place in zip(ids, places):
                if message_id not in entries:
                    entries[message_id] = place
                    kept.append(message_id)
            ids = kept
        self._append_ids(ids)

    def _append_ids(self, ids: list[str]) -> None:
        """Append to the order; a tail of _RUN ids becomes a sealed run (a tuple, which the
        collector stops tracking: one object to look at, where a list is one per id)."""
        tail = self._tail
        tail += ids
        if len(tail) - (0 if self._runs else self._head) >= _RUN:
            if not self._runs and self._head:  # the tail was the front: its head left
                del tail[:self._head]
                self._head = 0
            self._runs.append(tuple(tail))
            tail.clear()

    def _front(self) -> Sequence[str] | None:
        """The oldest run of ids (its first `_head` have left), or None when empty."""
        if self._runs:
            return self._runs[0]
        return self._tail if len(self._tail) > self._head else None

    def _at_of(self, message_id: str) -> int:
        return _AT.unpack_from(self._entries[message_id])[0]

    def _expire(self, cutoff: int) -> None:
        """The entries entered before `cutoff` leave: a prefix of the order."""
        while (run := self._front()) is not None:
            if self._at_of(run[-1]) < cutoff:
                self._drop(run, len(run))  # the whole run expired
                continue
            end = bisect_left(run, cutoff, self._head, len(run), key=self._at_of)
            if end > self._head:
                self._drop(run, end)
            return

    def _bound(self, max_entries: int) -> None:
        """The oldest entries past `max_entries` leave, counted as evictions."""
        excess = len(self._entries) - max_entries
        if excess <= 0:
            return
        self.evictions += excess
        while excess > 0 and (run := self._front()) is not None:
            end = min(len(run), self._head + excess)
            excess -= end - self._head
            self._bound_evicted_at = max(self._bound_evicted_at, self._at_of(run[end - 1]))
            self._drop(run, end)

    def _drop(self, run: Sequence[str], end: int) -> None:
        """The ids of `run` (the front) from `_head` to `end` leave."""
        deque(map(self._entries.__delitem__, run[self._head:end]), 0)  # a C loop
        if end < len(run):
            self._head = end
        elif self._runs:
            self._runs.popleft()
            self._head = 0
        else:  # the tail, all of it
            self._tail.clear()
            self._head = 0
        if not self._runs and self._head > _RUN:  # the tail's head: compact it
            del self._tail[:self._head]
            self._head = 0

    def _live_ids(self) -> list[str]:
        """Every id held, oldest first (a copy: truncate's rare rebuild)."""
        ids: list[str] = []
        for i, run in enumerate(self._runs):
            ids += run[self._head:] if i == 0 else run
        ids += self._tail[0 if self._runs else self._head:]
        return ids

    def _clear(self) -> None:
        self._entries.clear()
        self._runs.clear()
        self._tail = []
        self._head = 0
