"""A table replicated through an internal topic of the commitlog: events, snapshots, replay.

The master owns the table. Every change is a list of events that is appended to the table's
topic (table_records.py) and then applied to the in-memory state, both under `lock`, so the log
order is the apply order and replaying the log rebuilds the same state on any replica:

    writer:  with table.lock:  appended = table.commit(master, events)  # append, then apply
             result = appended.wait()      # outside the lock; a coroutine: await appended

Waiting for the flush and replication policy happens after the lock is released, so one slow
replication round does not serialize every writer. A refused append raises AppendRefused and
applies nothing. Events of the table's no-wait kinds are not waited for (the caller decides
what a lost one costs).

The state is loaded lazily for the current master: the first call that needs it in a master
role (`ensure_loaded`) replays the topic from its min offset. A node that becomes master by a
failover therefore resumes from what the old master replicated; a node that leaves the master
role loads again the next time it leads (its log may have been cut meanwhile). A table with
`initial_events` appends them (one batch, not waited for) the first time a node leads while the
table's topic has never had a record: how an old per-node file is imported once.

Followers (`follow=True`): a node that does not lead keeps the state too, from the records
reput dispatched into the table's queue (on a slave: up to its confirm offset), so it answers
from exactly its master's table at that log position. `follow()` applies the records after the
last one it applied (its queue offset `_next`) and starts over from the queue's min offset when
the state is not a follower's (the node led until now), when the store cut its log below what
was applied (`MessageStore.truncate_listeners`: a slave that diverged and was truncated to the
consistent point), or when the queue no longer holds `_next` (retention; a queue cut shorter).
`current()` is the state to read in any role. Becoming master replays (above), so the master's
state never depends on how a follower got where it is.

Snapshots: `maybe_snapshot` appends a snapshot event (the whole state) every `snapshot_every`
events, and every `snapshot_interval_ms` while there is any state, so replay stays short and
retention (which deletes files older than fileReservedTime) never deletes the newest snapshot.
Views: a table may keep RocketMQ-format JSON views (e.g. config/consumerOffset.json) that
`persist_views` rewrites when the state changed (on the master, and on followers of a following
table), each atomically; the records stay the source of truth. A view is never written from a
state that applied no record: an old file of that name stays until the table has content.

`TableService` steps every table of a node (snapshots and views) once a second.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterator, Protocol, Sequence, TypeVar

from store.codec import Message, MessageRecord
from store.errors import StoreError
from store.get_result import GetStatus
from store.json_config import JsonConfigFile
from store.put_result import PutResult, PutStatus
from common.service import Service

from cluster.config.node_role import NotMaster
from cluster.replicated.table_records import SNAPSHOT_KIND, TableRecordError, TableRecords

if TYPE_CHECKING:
    from master.master_role import Appended, MasterRole
    from common.clock import Clock
    from store.message_store import MessageStore

    from cluster.config.node_role import Role

log = logging.getLogger(__name__)
SNAPSHOT_EVERY = 1000
SNAPSHOT_INTERVAL_MS = 3600_000
REPLAY_BATCH = 256


class TableState(Protocol):
    """The pure state machine a table replicates."""
    version: int  # events applied (views are rewritten when it moves)
    events_since_snapshot: int

    def apply(self, event: dict[str, Any]) -> None: ...  # raises on an unknown event
    def snapshot_event(self) -> dict[str, Any]: ...  # {"kind": "snapshot", ...}: the whole state
    def is_empty(self) -> bool: ...


S = TypeVar("S", bound=TableState)


class AppendRefused(Exception):
    """The store refused the append of a change: nothing was applied."""

    def __init__(self, result: PutResult) -> None:
        super().__init__(f"{result.status.value}: {result.reason}")
        self.result = result


@dataclass
class TableView(Generic[S]):
    """A JSON file rendered from the state (RocketMQ's format), rewritten when it changed."""
    file: JsonConfigFile
    render: Callable[[S], dict[str, Any]]
    persisted_version: int = -1


class ReplicatedTable(Generic[S]):
    """Owns the state of one table: the master's (for the master role it was loaded for) or,
    for a following table on a node that does not lead, a follower's. `lock` guards the state,
    the follower position and the order of appends; `ensure_loaded` and `follow` take it."""

    def __init__(self, records: TableRecords, new_state: Callable[[], S], role: "Role",
                 store: "MessageStore", clock: "Clock", *, snapshot_every: int = SNAPSHOT_EVERY,
                 snapshot_interval_ms: int = SNAPSHOT_INTERVAL_MS, follow: bool = False,
                 initial_events: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self.records = records
        self.new_state = new_state
        self.role = role
        self.store = store
        self.clock = clock
        self.snapshot_every = snapshot_every
        self.snapshot_interval_ms = snapshot_interval_ms
        self.follows = follow
        self.initial_events = initial_events
        self.lock = threading.Lock()
        self.state: S = new_state()
        self.views: list[TableView[S]] = []
        self._loaded_for: object | None = None
        self._last_snapshot_ms = clock.now_ms()
        # follower position (guarded by `lock`)
        self._following = False  # `state` was built by follow() from the table's queue
        self._next = 0  # queue offset of the next record to apply
        self._applied_end = 0  # commitlog offset just past the last record applied
        self._cut: int | None = None  # lowest offset the store truncated to, not yet seen
        self._cut_lock = threading.Lock()  # guards only `_cut` (taken under reput's lock)
        if follow:
            store.truncate_listeners.append(self._on_truncate)

    @property
    def topic(self) -> str:
        return self.records.topic

    # -- loading ------------------------------------------------------------------------------
    def ensure_loaded(self) -> "MasterRole":
        """The current master role, with the state replayed for it (NotMaster on a node that
        does not lead; AppendRefused when the initial events were refused). Call without the
        lock."""
        master = self.role.require_master()
        if self._loaded_for is not master:
            with self.lock:
                if self._loaded_for is not master:
                    self.state = self.replay()
                    self._following = False
                    self._append_initial_events(master)
                    self._loaded_for = master
        return master

    def _append_initial_events(self, master: "MasterRole") -> None:
        if self.initial_events is None or self.store.max_offset_in_queue(self.topic, 0) > 0:
            return  # the table has had records: whatever they say is the table
        events = self.initial_events()
        if events:
            self.commit(master, events)
            log.warning("%s: %d initial event(s) appended", self.topic, len(events))

    def loaded_for_current_master(self) -> "MasterRole | None":
        master = self.role.master
        return master if master is not None and self._loaded_for is master else None

    def current(self) -> S:
        """The state to read now: the master's (loaded for the current master role); on a node
        that does not lead, a follower's brought up to the table's queue (NotMaster for a
        table that does not follow)."""
        if self.role.master is not None:
            try:
                self.ensure_loaded()
                return self.state
            except NotMaster:  # the role changed meanwhile
                pass
        if not self.follows:
            self.role.require_master()  # raises NotMaster (or the node leads again: retry)
            return self.current()
        return self.follow()

    def replay(self) -> S:
        """The state rebuilt from the table's topic, in log order, from its newest snapshot (a
        snapshot holds the whole state, so what precedes it changes nothing) or its min offset.
        From the min offset, a new master's replay grew with the table's whole history: 60k
        records and 3 s after a 6-minute soak; from the snapshot it is at most `snapshot_every`
        events."""
        state = self.new_state()
        applied = 0
        start = self._newest_snapshot()
        for _, event in self._records(start):
            self._apply(state, event)
            applied += 1
        log.info("%s replayed: %d records from queue offset %d", self.topic, applied, start)
        return state

    def _newest_snapshot(self) -> int:
        """Queue offset of the newest snapshot record, found by reading back from the end in
        batches and looking at each record's tag (the event kind) only; the queue's min offset
        when there is none."""
        store = self.store
        low = store.min_offset_in_queue(self.topic, 0)
        high = store.max_offset_in_queue(self.topic, 0)
        while high > low:
            begin = max(low, high - REPLAY_BATCH)
            offset, newest = begin, None
            while offset < high:
                result = store.get_messages(self.topic, 0, offset, high - offset)
                if result.status is not GetStatus.FOUND:
                    break
                for record in result.messages:
                    if record.queue_offset < high and record.tags == SNAPSHOT_KIND:
                        newest = record.queue_offset
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
            if newest is not None:
                return newest
            high = begin
        return low

    def _records(self, offset: int) -> Iterator[tuple[MessageRecord, dict[str, Any]]]:
        """(record, event) of the table's queue from `offset` up to what reput dispatched."""
        store = self.store
        while True:
            result = store.get_messages(self.topic, 0, offset, REPLAY_BATCH)
            if result.status is not GetStatus.FOUND:
                return
            for record in result.messages:
                yield record, self.records.from_body(record.body,
                                                     f"at queue offset {record.queue_offset}")
            if result.next_begin_offset <= offset:
                return
            offset = result.next_begin_offset

    def _apply(self, state: S, event: dict[str, Any]) -> None:
        try:
            state.apply(event)
        except (KeyError, TypeError, ValueError) as e:
            raise TableRecordError(f"cannot replay {self.topic}: {e}") from e

    # -- following ----------------------------------------------------------------------------
    def follow(self) -> S:
        """A follower's state, brought up to the records reput dispatched into the table's queue
        (see the module doc). TableRecordError when a record cannot be applied (the state then
        holds what preceded it)."""
        if (self._following and self._cut is None
                and self.store.max_offset_in_queue(self.topic, 0) == self._next):
            return self.state  # nothing new: no lock
        with self.lock:
            for _ in range(3):
                self._catch_up_locked()
                with self._cut_lock:
                    cut = self._cut
                if cut is None or cut >= self._applied_end:
                    break  # no truncation reached what was applied
        return self.state

    def _catch_up_locked(self) -> None:
        store, topic = self.store, self.topic
        with self._cut_lock:
            cut, self._cut = self._cut, None
        low, high = store.min_offset_in_queue(topic, 0), store.max_offset_in_queue(topic, 0)
        if not self._following:
            reason = "the state was not a follower's"
        elif cut is not None and cut < self._applied_end:
            reason = f"the log was cut at {cut}, below {self._applied_end}"
        elif not low <= self._next <= high:
            reason = f"queue offset {self._next} is outside [{low}, {high}]"
        else:
            reason = ""
        if reason:
            log.info("%s: (re)building the follower state: %s", topic, reason)
            self.state = self.new_state()
            self._next, self._applied_end = low, 0
            self._following, self._loaded_for = True, None
        for record, event in self._records(self._next):
            self._apply(self.state, event)
            self._next = record.queue_offset + 1
            self._applied_end = record.physical_offset + record.total_size

    def _on_truncate(self, offset: int) -> None:
        """MessageStore.truncate_listeners (under reput's lock: only a flag)."""
        with self._cut_lock:
            self._cut = offset if self._cut is None else min(self._cut, offset)

    # -- changing -----------------------------------------------------------------------------
    def commit(self, master: "MasterRole", events: list[dict[str, Any]],
               extra: Sequence[Message] = ()) -> "Appended":
        """Append `extra` messages and the events' records as one batch, then apply the events.
        Call with the lock held. AppendRefused (nothing applied) when the store refuses. The
        change holds under the flush/replication policy once the returned Appended is waited
        for, outside the lock: `wait()` on a thread, `await` on the event loop."""
        messages = [*extra, *(self.records.to_message(e) for e in events)]
        appended = master.append(messages, allow_system_topic=True)
        if appended.result.status is not PutStatus.PUT_OK:
            raise AppendRefused(appended.result)
        for event in events:
            self.state.apply(event)
        return appended

    def change(self, events: list[dict[str, Any]]) -> PutResult:
        """For a caller on a thread: ensure_loaded, commit under the lock, wait outside it."""
        master = self.ensure_loaded()
        with self.lock:
            appended = self.commit(master, events)
        return appended.wait()

    # -- snapshots and views ------------------------------------------------------------------
    def maybe_snapshot(self) -> bool:
        """Append a snapshot when one is due (see the module doc). True when one was written."""
        master = self.loaded_for_current_master()
        if master is None:
            return False
        now = self.clock.now_ms()
        st = self.state
        due = st.events_since_snapshot >= self.snapshot_every or (
            (st.events_since_snapshot > 0 or not st.is_empty())
            and now - self._last_snapshot_ms >= self.snapshot_interval_ms)
        if not due:
            return False
        with self.lock:
            appended = self.commit(master, [self.state.snapshot_event()])
        self._last_snapshot_ms = now
        result = appended.wait()  # the table service's thread
        if result.status is not PutStatus.PUT_OK:
            log.warning("%s snapshot: %s %s", self.topic, result.status.value, result.reason)
        return True

    def add_view(self, path: str, render: Callable[[S], dict[str, Any]]) -> TableView[S]:
        view = TableView(JsonConfigFile(path), render)
        self.views.append(view)
        return view

    def persist_views(self) -> int:
        """Rewrite the views whose content changed since their last write: on the master, and
        on a follower of a following table (after `follow()`). Returns how many were written;
        DiskError and TableRecordError propagate."""
        if self.loaded_for_current_master() is None:
            if not self.follows or self.role.master is not None:
                return 0
            self.follow()
        written = 0
        for view in self.views:
            with self.lock:
                version = self.state.version
                if version == view.persisted_version or version == 0:
                    continue  # unchanged, or no record applied: leave an old file alone
                content = view.render(self.state)
            view.file.persist(content)
            view.persisted_version = version
            written += 1
        return written


class TableService(Service):
    """Steps the node's replicated tables: due snapshots, then changed views."""
    name = "replicated-tables"

    def __init__(self, tables: Sequence[ReplicatedTable]) -> None:
        super().__init__()
        self.tables = list(tables)

    def step(self) -> None:
        for table in self.tables:
            try:
                table.maybe_snapshot()
            except (AppendRefused, NotMaster) as e:  # e.g. not writable now: the next step
                log.warning("%s snapshot refused: %s", table.topic, e)  # tries again
            try:
                table.persist_views()
            except StoreError as e:
                log.error("cannot write a view of %s: %s", table.topic, e)
            except TableRecordError as e:
                log.error("%s", e)

    def wait_interval(self) -> float:
        return 1.0
