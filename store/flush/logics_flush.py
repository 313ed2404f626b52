"""Flushes consume queues and the index, then records in the checkpoint how far each is durable
(RocketMQ's FlushConsumeQueueService + StoreCheckpoint upkeep)."""
from __future__ import annotations

import logging
from typing import Callable

from store.checkpoint import StoreCheckpoint
from common.clock import Clock
from store.errors import DiskError
from common.service import Service

log = logging.getLogger(__name__)


class LogicsFlushService(Service):
    """Flushes the consume queues and the index and then stamps the checkpoint with how far
    each is durable (logics, physic and index timestamps, which only move forward). Owns the
    round's pacing (`least_pages`, the last thorough round) and `failed`, which is final: a
    failed round stops every later one and `on_failure` turns the store not writable.

    No lock of its own. Rounds run on the service thread, and an admin Flush
    (cluster/admin/maintenance.py) runs one on its own thread meanwhile; what a round calls
    copes with that (the queues and index files flush under hold()/release(), the checkpoint
    writes its file under its own lock)."""

    name = "flush-logics"

    def __init__(self, cq_store, index_service, checkpoint: StoreCheckpoint, clock: Clock, *,
                 dispatched_stamp: Callable[[], int], physic_stamp: Callable[[], int],
                 on_failure: Callable[[DiskError], None], interval_ms: int, least_pages: int,
                 thorough_interval_ms: int) -> None:
        super().__init__()
        self.cq_store = cq_store
        self.index_service = index_service
        self.checkpoint = checkpoint
        self.clock = clock
        self.dispatched_stamp = dispatched_stamp  # store time of the last dispatched record
        self.physic_stamp = physic_stamp  # store time covered by the last commitlog flush
        self.on_failure = on_failure
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._last_thorough = clock.monotonic()
        self.failed = False

    def step(self, thorough: bool = False, whole_index: bool = False) -> None:
        """One round: consume queues (all pages when `thorough`), the index's sealed files
        (the one being written too with `whole_index`: shutdown, an admin flush), then the
        checkpoint."""
        if self.failed:
            return
        least = self.least_pages
        now = self.clock.monotonic()
        if thorough or (now - self._last_thorough) * 1000 >= self.thorough_interval_ms:
            least = 0
            self._last_thorough = now
        logics_stamp = self.dispatched_stamp()  # before the flush: it covers at least this
        try:
            self.cq_store.flush(least)
            index_stamp = (self.index_service.flush(sealed_only=not whole_index)
                           if self.index_service is not None else 0)
            if least == 0:
                # Only a thorough flush covers every queue up to the stamp (RocketMQ does the
                # same); after a least-pages round some units may still be in memory only.
                self.checkpoint.logics_msg_timestamp = max(self.checkpoint.logics_msg_timestamp,
                                                           logics_stamp)
            self.checkpoint.physic_msg_timestamp = max(self.checkpoint.physic_msg_timestamp,
                                                       self.physic_stamp())
            if index_stamp:
                self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp,
                                                          index_stamp)
            self.checkpoint.flush()
        except DiskError as e:
            self.failed = True
            log.error("consume queue / checkpoint flush failed: %s", e)
            self.on_failure(e)

    def wait_interval(self) -> float:
        return self.interval_ms / 1000.0

    def on_stop(self) -> None:
        self.step(thorough=True, whole_index=True)
