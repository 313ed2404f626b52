"""The table of consume queues (consume_queue.py), keyed by (topic, queue id): discovered on
load, created on first use, and reput's consume-queue Dispatcher, which hands each queue its
runs of consecutive records. Operations over every queue (recovery, truncation, retention,
flush) go through here."""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Sequence

from .consume_queue import DEFAULT_CQ_FILE_SIZE, ConsumeQueue
from store.codec.dispatch import DispatchRequest
from store.commitlog.fileio import DEFAULT_FILE_IO, FileIO


class ConsumeQueueStore:
    """All consume queues, keyed by (topic, queue_id) and created on first use. It is the
    consume-queue Dispatcher of reput."""

    def __init__(self, root_dir: str, file_size: int = DEFAULT_CQ_FILE_SIZE,
                 io: FileIO = DEFAULT_FILE_IO) -> None:
        self.root_dir = root_dir
        self.file_size = file_size
        self.io = io
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()  # guards the dict, never held during I/O of a queue

    def load(self) -> list[str]:
        """Discover `<root>/<topic>/<queueId>` directories holding queue files."""
        notes: list[str] = []
        if not os.path.isdir(self.root_dir):
            return notes
        for topic in sorted(os.listdir(self.root_dir)):
            topic_dir = os.path.join(self.root_dir, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qname in sorted(os.listdir(topic_dir)):
                qdir = os.path.join(topic_dir, qname)
                if not (qname.isdigit() and os.path.isdir(qdir)):
                    continue
                cq = ConsumeQueue(topic, int(qname), self.root_dir, self.file_size, self.io)
                notes += cq.load()
                with self._lock:
                    self._queues[(topic, int(qname))] = cq
        return notes

    def queues(self) -> list[ConsumeQueue]:
        with self._lock:
            return list(self._queues.values())

    def recover(self) -> None:
        for cq in self.queues():
            cq.recover()

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        with self._lock:
            return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                cq = ConsumeQueue(topic, queue_id, self.root_dir, self.file_size, self.io)
                cq.load()  # a directory may exist (empty queue left from an earlier run)
                self._queues[(topic, queue_id)] = cq
            return cq

    def dispatch(self, request: DispatchRequest) -> None:
        self.dispatch_many((request,))

    def dispatch_many(self, requests: Sequence[DispatchRequest]) -> None:
        """Each queue's units of `requests`, a run of consecutive records for the same queue
        at a time (ConsumeQueue.put_run)."""
        run: list[DispatchRequest] = []
        run_key: tuple[str, int] | None = None
        for request in requests:
            if not request.dispatchable:
                continue  # prepared / rollback transaction records have no queue position
            key = (request.topic, request.queue_id)
            if key != run_key:
                if run:
                    self._queue(run_key).put_run(run)  # type: ignore[arg-type]
                run, run_key = [], key
            run.append(request)
        if run:
            self._queue(run_key).put_run(run)  # type: ignore[arg-type]

    def _queue(self, key: tuple[str, int]) -> ConsumeQueue:
        # A dict read is atomic under the GIL: only a queue's creation needs the lock.
        cq = self._queues.get(key)
        return cq if cq is not None else self.get_or_create(*key)

    def truncate_dirty(self, phy_offset: int) -> None:
        for cq in self.queues():
            cq.truncate_dirty(phy_offset)

    def max_physic_offset(self) -> int:
        """Where reput must resume: the end of the newest record any queue points at."""
        return max((cq.max_physic_offset for cq in self.queues()), default=0)

    def queue_offset_table(self) -> dict[tuple[str, int], int]:
        """Next queue offset per topic-queue, as the consume queues know it."""
        return {(cq.topic, cq.queue_id): cq.max_offset() for cq in self.queues()}

    def flush(self, least_pages: int = 0) -> None:
        for cq in self.queues():
            cq.flush(least_pages)

    def correct_min_offset(self, min_phy_offset: int) -> None:
        for cq in self.queues():
            cq.correct_min_offset(min_phy_offset)

    def delete_expired(self, min_phy_offset: int, *, now_ms: int | None = None) -> int:
        return sum(cq.delete_expired_files(min_phy_offset, now_ms=now_ms)
                   for cq in self.queues())

    def topics(self) -> list[str]:
        with self._lock:
            return sorted({t for t, _ in self._queues})

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            victims = [k for k in self._queues if k[0] == topic]
            queues = [self._queues.pop(k) for k in victims]
        for cq in queues:
            cq.destroy()
        # FileIO has no rmdir. A directory left behind only makes load() bring back an
        # empty queue, so a failure here is not worth surfacing.
        for path in [cq.directory for cq in queues] + [os.path.join(self.root_dir, topic)]:
            with contextlib.suppress(OSError):
                os.rmdir(path)

    def close(self) -> None:
        for cq in self.queues():
            cq.close()

