"""A table replicated through an internal topic of the commitlog: events, snapshots, replay.

The master owns the table. Every change is a list of events that is appended to the table's
topic (table_records.py) and then applied to the in-memory state, both under `lock`, so the log
order is the apply order and replaying the log rebuilds the same state on any replica:

    writer:  with table.lock:  pending = table.commit(master, events)   # append, then apply
             result = table.wait(master, pending)                         # outside the lock

Waiting for the flush and replication policy happens after the lock is released, so one slow
replication round does not serialize every writer. A refused append raises AppendRefused and
applies nothing. Events of the table's no-wait kinds are not waited for (the caller decides
what a lost one costs).

The state is loaded lazily for the current master: the first call that needs it in a master
role (`ensure_loaded`) replays the topic from its min offset. A node that becomes master by a
failover therefore resumes from what the old master replicated; a node that leaves the master
role loads again the next time it leads (its log may have been cut meanwhile).

Snapshots: `maybe_snapshot` appends a snapshot event (the whole state) every `snapshot_every`
events, and every `snapshot_interval_ms` while there is any state, so replay stays short and
retention (which deletes files older than fileReservedTime) never deletes the newest snapshot.
Views: a table may keep RocketMQ-format JSON views (e.g. config/consumerOffset.json) that
`persist_views` rewrites when the state changed; the records stay the source of truth.

`TableService` steps every table of a node (snapshots and views) once a second.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, Sequence, TypeVar

from store.codec import Message
from store.errors import StoreError
from store.get_result import GetStatus
from store.json_config import JsonConfigFile
from store.put_result import PutResult, PutStatus
from store.service import Service

from cluster.node.node_role import NotMaster
from cluster.replicated.table_records import TableRecordError, TableRecords

if TYPE_CHECKING:
    from master.master_role import MasterRole
    from store.clock import Clock
    from store.message_store import MessageStore

    from cluster.node.node_role import Role

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
class Pending:
    """An appended change still to be waited for (outside the lock)."""
    messages: Sequence[Message]
    result: PutResult


@dataclass
class TableView(Generic[S]):
    """A JSON file rendered from the state (RocketMQ's format), rewritten when it changed."""
    file: JsonConfigFile
    render: Callable[[S], dict[str, Any]]
    persisted_version: int = -1


class ReplicatedTable(Generic[S]):
    """Owns the state of one table for the master it was loaded for. `lock` guards the state
    and the order of appends; `ensure_loaded` takes it to replay."""

    def __init__(self, records: TableRecords, new_state: Callable[[], S], role: "Role",
                 store: "MessageStore", clock: "Clock", *, snapshot_every: int = SNAPSHOT_EVERY,
                 snapshot_interval_ms: int = SNAPSHOT_INTERVAL_MS) -> None:
        self.records = records
        self.new_state = new_state
        self.role = role
        self.store = store
        self.clock = clock
        self.snapshot_every = snapshot_every
        self.snapshot_interval_ms = snapshot_interval_ms
        self.lock = threading.Lock()
        self.state: S = new_state()
        self.views: list[TableView[S]] = []
        self._loaded_for: object | None = None
        self._last_snapshot_ms = clock.now_ms()

    @property
    def topic(self) -> str:
        return self.records.topic

    # -- loading ------------------------------------------------------------------------------
    def ensure_loaded(self) -> "MasterRole":
        """The current master role, with the state replayed for it (NotMaster on a node that
        does not lead). Call without the lock."""
        master = self.role.require_master()
        if self._loaded_for is not master:
            with self.lock:
                if self._loaded_for is not master:
                    self.state = self.replay()
                    self._loaded_for = master
        return master

    def loaded_for_current_master(self) -> "MasterRole | None":
        master = self.role.master
        return master if master is not None and self._loaded_for is master else None

    def replay(self) -> S:
        """The state rebuilt from the table's topic (from its min offset, in log order)."""
        store = self.store
        state = self.new_state()
        offset = store.min_offset_in_queue(self.topic, 0)
        applied = 0
        while True:
            result = store.get_messages(self.topic, 0, offset, REPLAY_BATCH)
            if result.status is not GetStatus.FOUND:
                break
            for record in result.messages:
                where = f"at queue offset {record.queue_offset}"
                try:
                    state.apply(self.records.from_body(record.body, where))
                except (TableRecordError, KeyError, TypeError, ValueError) as e:
                    raise TableRecordError(f"cannot replay {self.topic}: {e}") from e
                applied += 1
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        log.info("%s replayed: %d records", self.topic, applied)
        return state

    # -- changing -----------------------------------------------------------------------------
    def commit(self, master: "MasterRole", events: list[dict[str, Any]],
               extra: Sequence[Message] = ()) -> Pending:
        """Append `extra` messages and the events' records as one batch, then apply the events.
        Call with the lock held. AppendRefused (nothing applied) when the store refuses."""
        messages = [*extra, *(self.records.to_message(e) for e in events)]
        result = master.append(messages, allow_system_topic=True)
        if result.status is not PutStatus.PUT_OK:
            raise AppendRefused(result)
        for event in events:
            self.state.apply(event)
        return Pending(messages, result)

    def wait(self, master: "MasterRole", pending: Pending) -> PutResult:
        """Wait (without the lock) until the change holds under the flush/replication policy."""
        return master.wait_durable(pending.messages, pending.result)

    def change(self, events: list[dict[str, Any]]) -> PutResult:
        """ensure_loaded, commit under the lock, wait outside it."""
        master = self.ensure_loaded()
        with self.lock:
            pending = self.commit(master, events)
        return self.wait(master, pending)

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
            pending = self.commit(master, [self.state.snapshot_event()])
        self._last_snapshot_ms = now
        result = self.wait(master, pending)
        if result.status is not PutStatus.PUT_OK:
            log.warning("%s snapshot: %s %s", self.topic, result.status.value, result.reason)
        return True

    def add_view(self, path: str, render: Callable[[S], dict[str, Any]]) -> TableView[S]:
        view = TableView(JsonConfigFile(path), render)
        self.views.append(view)
        return view

    def persist_views(self) -> int:
        """Rewrite the views whose content changed since their last write (on the master
        only: a slave's state is not loaded). Returns how many were written; DiskError
        propagates."""
        if self.loaded_for_current_master() is None:
            return 0
        written = 0
        for view in self.views:
            with self.lock:
                version = self.state.version
                if version == view.persisted_version:
                    continue
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

    def wait_interval(self) -> float:
        return 1.0
