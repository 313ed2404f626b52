"""The master role of a node: the write path with its replication wait, the ack tracker, and
the registry of replication streams.

    append -> [SYNC_MASTER: refuse if fewer in sync than minInSyncReplicas]
           -> MessageStore.append                                   (no waiting)
    Appended, waited for by its holder (a thread: wait(); a coroutine: await)
           -> the store's flush policy (SYNC_FLUSH: on disk)
           -> [SYNC_MASTER: until the required in-sync slaves acked the end,
               FLUSH_SLAVE_TIMEOUT after slaveTimeout]

The confirm offset (min of the in-sync acks and the master's max) bounds the master's own
reput, so consumers never read what a failover could take away.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Generator, Sequence

from ha.ack_latency import SlowRule
from ha.ack_tracker import AckTracker, SlaveAckState
from ha.epoch import EpochCache
from ha.master_session import MasterView
from common.clock import Clock
from store.codec import Message
from common.completion import Completion
from store.config import StoreConfig
from store.message_store import MessageStore, waits_for_store
from store.put_result import PutResult, PutStatus
from common.service import PeriodicTask

from .write_lease import WriteLease

if TYPE_CHECKING:
    from master.replication_servicer import MasterConnection

log = logging.getLogger(__name__)


class MasterRole:
    """A node's master role, from `start()` until `stop()` (a role switch makes a new one).

    Owns: the write path's replication step (`append` refuses when too few replicas are in
    sync; the `Appended` it returns waits for the slaves' acks), the `AckTracker` (in-sync
    set, confirm offset, waiting puts), the registry of `MasterConnection`s (one per slave
    stream) and the housekeeping thread. Shares, without owning: the store (it appends through
    it and installs `confirm_source` and an append listener there) and the node's `EpochCache`
    (read only).

    Threads and locks: callers on threads (the admin servicer, the transaction service) and
    coroutines on the server's event loop (sends, consumer state changes) call `append`; the
    former wait with `Appended.wait()`, the latter await it; the event loop calls `on_acked`
    and the tracker (each connection's acks); the housekeeping thread calls `housekeeping`;
    the node's role switch calls `start` and `stop`. `_lock` guards writes to the registry and
    to `closed`, so no connection is added after `stop` closed them all; readers of either
    take no lock (a copy-on-write tuple, a bool). The tracker has its own lock; everything
    else is set once in `__init__`.
    """

    def __init__(self, store: MessageStore, epochs: EpochCache, broker_name: str,
                 clock: Clock, *, sync_master: bool, lease: WriteLease | None = None) -> None:
        c = store.config
        self.sync_master = sync_master
        self.lease = lease  # under a controller: writes stop when it runs out (write_lease.py)
        self.store = store
        self.epochs = epochs
        self.broker_name = broker_name
        self.clock = clock
        self.tracker = AckTracker(clock, max_gap=c.ha_max_gap_not_in_sync,
                                  max_catchup_ms=c.ha_max_time_slave_not_catchup,
                                  in_sync_replicas=c.in_sync_replicas,
                                  min_in_sync_replicas=c.min_in_sync_replicas,
                                  all_ack=c.all_ack_in_sync_state_set,
                                  slow=SlowRule.of(c))
        self._lock = threading.Lock()
        # Copy-on-write: every put reads it (to wake the senders) without taking a lock,
        # since a lock taken by every put convoys under the GIL.
        self._connections: tuple[MasterConnection, ...] = ()
        # Shrinks the in-sync set, times out sync waiters and closes silent streams.
        self._housekeeping = PeriodicTask("master-housekeeping", self.housekeeping, 0.05)
        self.closed = False

    @property
    def config(self) -> StoreConfig:
        """The store's config as it is now (slaveTimeout changes at runtime)."""
        return self.store.config

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.store.confirm_source = self.confirm_offset
        self.store.append_listeners.append(self._on_append)
        self._housekeeping.start()
        log.info("master of %s in epoch %d from offset %d", self.broker_name,
                 self.epochs.last_epoch, self.store.max_phy_offset())

    def stop(self, reason: str = "this node stopped being master") -> None:
        with self._lock:  # after this, add_connection refuses: the loop below closes them all
            self.closed = True
        self._housekeeping.stop()
        if self._on_append in self.store.append_listeners:
            self.store.append_listeners.remove(self._on_append)
        for conn in self.connections():
            conn.close(reason)
        self.tracker.fail_all(PutStatus.SERVICE_NOT_AVAILABLE)
        end = self.confirm_offset()
        self.store.confirm_source = lambda: end  # nothing new becomes visible until a new role

    # -- writes -----------------------------------------------------------------------------
    def put_messages(self, msgs: Sequence[Message], *, allow_system_topic: bool = False
                     ) -> PutResult:
        """A put for a caller on a thread: the append, then the wait in the calling thread.
        A coroutine awaits `append(msgs, timed=True)` instead."""
        return self.append(msgs, allow_system_topic=allow_system_topic, timed=True).wait()

    def append(self, msgs: Sequence[Message], *, allow_system_topic: bool = False,
               timed: bool = False, dedup: bool = False) -> "Appended":
        """The in-sync check and the append, without waiting: what is still to be waited for
        (the flush and replication policy) is the returned Appended's, which its holder waits
        for in its own execution model. Callers that must order their appends under their own
        lock (consumer state records) append there and wait outside it. `timed`: the wait's
        end records the put's latency (a client's put, not an internal record). `dedup`: a
        client's send, whose repeats of sends in the duplicate window are answered with their
        originals' places (MessageStore.append); the Appended then waits for the originals'
        end as for its own, so a repeat is answered OK only once the original holds under the
        same policy (a repeat of a send still waiting for its acks waits for them too)."""
        return Appended(self, msgs, self._append(msgs, allow_system_topic, dedup), timed)

    def _append(self, msgs: Sequence[Message], allow_system_topic: bool,
                dedup: bool = False) -> PutResult:
        if self.closed:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="this node is no longer master")
        refusal = self.lease_refusal()
        if refusal:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=refusal)
        if self.sync_master and waits_for_store(msgs) and not self.tracker.enough_in_sync():
            return PutResult(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, reason=(
                f"{1 + self.tracker.in_sync_count()} replicas in sync (master included"
                f"{self.tracker.out_of_sync_note()}), "
                f"minInSyncReplicas={self.config.min_in_sync_replicas}"))
        return self.store.append(msgs, allow_system_topic=allow_system_topic, dedup=dedup)

    def lease_refusal(self) -> str:
        """Why this master may not acknowledge writes on its own word now, or "". Under a
        controller, once the lease ran out, only a SYNC_MASTER with members to wait for may go
        on (each write then needs the acks of the controller's approved set, which cannot shrink
        without the controller)."""
        lease = self.lease
        if lease is None or lease.valid():
            return ""
        if self.sync_master and self.tracker.member_ids():
            return ""
        return (f"no answer from the controller for {lease.lease_ms + lease.expired_for_ms()} ms "
                f"and no in-sync slave to confirm writes: a new master may have been elected, so "
                f"this one stops acknowledging")

    def _replica_wait(self, msgs: Sequence[Message], result: PutResult
                      ) -> tuple[Completion[PutStatus], int] | None:
        """The wait for the slaves' acks of a stored put (SYNC_MASTER), with its timeout (ms)."""
        if result.status is not PutStatus.PUT_OK or not (self.sync_master and waits_for_store(msgs)):
            return None
        timeout_ms = self.config.slave_timeout
        return self.tracker.wait(result.end_offset, timeout_ms), timeout_ms

    def _replicated(self, result: PutResult, waiter: Completion[PutStatus], timeout_ms: int,
                    status: PutStatus | None) -> PutResult:
        if status is None:  # the tracker's housekeeping did not time it out: do it here
            waiter.complete(PutStatus.FLUSH_SLAVE_TIMEOUT)
            status = waiter.value
        reason = ""
        if status is PutStatus.FLUSH_SLAVE_TIMEOUT:
            reason = (f"not acknowledged by {self.tracker.required_acks()} in-sync slave(s) within "
                      f"slaveTimeout={timeout_ms} ms (stored on the master)")
        return PutResult(status, result.appends, reason, result.repeated)

    # -- replication ------------------------------------------------------------------------
    def view(self) -> MasterView:
        max_offset = self.store.max_phy_offset()
        return MasterView(self.store.min_phy_offset(), max_offset,
                          self.tracker.confirm_offset(max_offset), self.epochs,
                          self.config.mapped_file_size_commit_log)

    def confirm_offset(self) -> int:
        return self.tracker.confirm_offset(self.store.max_phy_offset())

    def add_connection(self, conn: "MasterConnection") -> bool:
        with self._lock:
            if self.closed:
                return False
            self._connections = (*self._connections, conn)
            return True

    def remove_connection(self, conn: "MasterConnection") -> None:
        with self._lock:
            self._connections = tuple(c for c in self._connections if c is not conn)
        if conn.slave_id and not any(c.slave_id == conn.slave_id for c in self.connections()):
            self.tracker.disconnect(conn.slave_id)
        self.store.wake_dispatch()

    def connections(self) -> tuple["MasterConnection", ...]:
        return self._connections

    def on_acked(self) -> None:
        # The confirm offset may have moved: dispatch here, and tell the slaves.
        self.store.wake_dispatch()
        for conn in self.connections():
            conn.wakeup()

    def housekeeping(self) -> None:
        before = self.tracker.in_sync_ids()
        self.tracker.refresh(self.store.max_phy_offset())
        after = self.tracker.in_sync_ids()
        if before != after:
            notes = self.tracker.member_notes()
            log.info("in-sync set %s -> %s (%s)", sorted(before), sorted(after),
                     "; ".join(f"{s} {notes.get(s, '')}" for s in sorted(before ^ after)))
        now = self.clock.monotonic()
        limit = self.config.ha_housekeeping_interval / 1000.0
        for conn in self.connections():
            if now - conn.last_received > limit:
                conn.close(f"nothing from slave {conn.slave_id or conn.peer} for "
                           f"{self.config.ha_housekeeping_interval} ms")

    def _on_append(self, end_offset: int) -> None:
        connections = self._connections
        for conn in connections:
            conn.wakeup()
        if not connections and self.store.appends_wake_reput:
            # No slave to wait for: the append moved the confirm offset, so reput may dispatch
            # it now (MessageStore.appends_wake_reput). With slaves, their acks move it and
            # wake reput (on_acked).
            self.store.wake_dispatch()

    def slave_states(self) -> list[SlaveAckState]:
        return self.tracker.states(self.store.max_phy_offset())


class Appended:
    """A put appended by `MasterRole.append` and its wait for the flush and replication policy.

    `result` is the append's own outcome: a refusal (nothing written), or PUT_OK with where
    each message landed. What still has to hold before the put may be acknowledged (SYNC_FLUSH:
    on disk; SYNC_MASTER: acked by the in-sync slaves) is waited for by the holder, in its own
    execution model: `wait()` blocks the calling thread, `await appended` waits on the event
    loop. A coroutine must await: the slaves' acks arrive on the server's loop, so blocking it
    would wait for itself. Both walk the same two steps with MasterRole's rules
    (`_replica_wait`, `_replicated`) and give the same PutResult; only how each step is waited
    for differs. Used by one caller, once; no lock (its fields are set in `__init__`).
    """

    __slots__ = ("role", "messages", "result", "_started")

    def __init__(self, role: MasterRole, messages: Sequence[Message], result: PutResult,
                 timed: bool) -> None:
        self.role = role
        self.messages = messages
        self.result = result
        self._started = time.perf_counter() if timed else None

    def wait(self) -> PutResult:
        """The final result, waited for in the calling thread."""
        role, result = self.role, self.result
        if result.status is PutStatus.PUT_OK:
            flush = role.store.flush_wait(self.messages, result)
            if flush is not None:
                result = flush.wait()
            wait = role._replica_wait(self.messages, result)
            if wait is not None:
                waiter, timeout_ms = wait
                result = role._replicated(result, waiter, timeout_ms,
                                          waiter.wait(timeout_ms / 1000.0 + 0.5))
        return self._done(result)

    def __await__(self) -> Generator[Any, None, PutResult]:
        return self._awaited().__await__()

    async def _awaited(self) -> PutResult:
        role, result = self.role, self.result
        if result.status is PutStatus.PUT_OK:
            flush = role.store.flush_wait(self.messages, result)
            if flush is not None:
                result = await flush
            wait = role._replica_wait(self.messages, result)
            if wait is not None:
                waiter, timeout_ms = wait
                result = role._replicated(result, waiter, timeout_ms,
                                          await waiter.wait_async(timeout_ms / 1000.0 + 0.5))
        return self._done(result)

    def _done(self, result: PutResult) -> PutResult:
        if self._started is not None:
            self.role.store.put_latency.observe(result.status.name,
                                                time.perf_counter() - self._started)
        return result
