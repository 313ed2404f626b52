"""Driver side: discover the files of each replica's store and read its small metadata.

Nothing here reads record data. Per replica: the commitlog file list (offsets and sizes), the
checkpoint (confirm offset), the epoch file, the consume-queue file list, the index file
headers and the consumer offsets (`config/consumerOffset.json`, RocketMQ's format
`{"offsetTable": {"topic@group": {"0": 12, ...}}}`) when present. The file lists come from
store.readonly.StoreReader, the read-only view the `verify` command uses.

`split_points` picks record boundaries inside large commitlog files from the consume queues
(binary search per queue for the first unit at or after each target offset), so that a file can
be decoded by several tasks; the executors check every such boundary before trusting it.
"""
from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

from store.checkpoint import StoreCheckpoint
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, is_filler, is_valid
from store.epoch_file import EpochFile
from store.errors import StoreError
from store.json_config import JsonConfigFile
from store.layout import StoreLayout
from store.readonly import NotAStoreDirectory, QueueFiles, StoreReader


class BadInput(Exception):
    """A replica directory is missing or is not a store (exit status 2)."""


@dataclass(frozen=True)
class CommitLogFile:
    path: str
    base: int
    size: int

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(frozen=True)
class CQFile:
    topic: str
    queue_id: int
    path: str
    base: int  # byte offset of the first unit in the queue (name of the file)
    size: int


@dataclass
class ReplicaLayout:
    """What the audit's driver found in one replica's store directory before scanning: its
    commitlog and consume-queue files, file size, confirm offset, checkpoint, epochs, index
    headers, consumer offsets, whether it shut down cleanly, and notes on what it skipped."""

    name: str
    root: str
    commitlog: list[CommitLogFile]
    file_size: int
    confirm_offset: int
    checkpoint: dict
    epochs: list[tuple[int, int]]  # (epoch, start offset)
    cq_files: list[CQFile]
    index: list[dict]
    consumer_offsets: dict[tuple[str, str], dict[int, int]]  # (topic, group) -> {queue: offset}
    unclean: bool  # an `abort` file: the node is running or did not shut down cleanly
    notes: list[str] = field(default_factory=list)

    @property
    def min_offset(self) -> int:
        return self.commitlog[0].base if self.commitlog else 0

    @property
    def files_end(self) -> int:
        return self.commitlog[-1].end if self.commitlog else 0

    @property
    def last_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else 0

    def summary(self) -> dict:
        return {"name": self.name, "root": self.root, "commitlog_files": len(self.commitlog),
                "file_size": self.file_size, "min_offset": self.min_offset,
                "files_end": self.files_end, "confirm_offset": self.confirm_offset,
                "checkpoint": self.checkpoint, "epochs": [list(e) for e in self.epochs],
                "last_epoch": self.last_epoch, "cq_files": len(self.cq_files),
                "queues": len({(f.topic, f.queue_id) for f in self.cq_files}),
                "index_files": self.index, "consumer_groups": len(self.consumer_offsets),
                "unclean_shutdown": self.unclean, "notes": list(self.notes)}


def discover(root: str, name: str) -> ReplicaLayout:
    """The layout of one replica. BadInput for a missing directory or one that is not a store."""
    if not os.path.isdir(root):
        raise BadInput(f"{root}: no such directory")
    try:
        reader = StoreReader(root)
    except NotAStoreDirectory as e:
        raise BadInput(str(e)) from None
    notes: list[str] = []
    try:
        commitlog = [CommitLogFile(f.path, f.base, f.size) for f in reader.commitlog_files]
        cq_files = [CQFile(q.topic, q.queue_id, f.path, f.base, f.size)
                    for q in reader.queues() for f in q.files]
        index = []
        for ix in reader.index_files():
            h = ix.header
            index.append({"file": ix.name, "size": ix.size} if h is None else {
                "file": ix.name, "size": ix.size, "begin_timestamp": h.begin_timestamp,
                "end_timestamp": h.end_timestamp, "begin_phy_offset": h.begin_phy_offset,
                "end_phy_offset": h.end_phy_offset, "entries": ix.entries})
        cp = reader.checkpoint()
        unclean = reader.abort_exists
        file_size = reader.file_size
    finally:
        reader.close()
    if cp.damaged:
        notes.append(f"checkpoint unusable ({cp.damage_reason}): confirm offset taken as 0")
    elif not cp.existed:
        notes.append("no checkpoint file: confirm offset taken as 0")
    if unclean:
        notes.append("abort file present: the node is running or crashed (read as is)")
    try:
        epochs = EpochFile(StoreLayout(root).epoch_file).load()
    except StoreError as e:
        epochs = []
        notes.append(f"epoch file unusable, epochs taken as empty: {e}")
    return ReplicaLayout(
        name=name, root=os.path.abspath(root), commitlog=commitlog, file_size=file_size,
        confirm_offset=cp.confirm_phy_offset, checkpoint=_checkpoint_dict(cp), epochs=epochs,
        cq_files=cq_files, index=index, consumer_offsets=_consumer_offsets(root, notes),
        unclean=unclean, notes=notes)


def _checkpoint_dict(cp: StoreCheckpoint) -> dict:
    return {k: v for k, v in cp.fields()._asdict().items()} | {"existed": cp.existed}


def _consumer_offsets(root: str, notes: list[str]) -> dict[tuple[str, str], dict[int, int]]:
    path = StoreLayout(root).consumer_offset
    try:
        data = JsonConfigFile(path).load()
    except StoreError as e:
        notes.append(f"consumer offsets unusable: {e}")
        return {}
    if data is None:
        return {}
    table = data.get("offsetTable")
    if not isinstance(table, dict):
        notes.append(f"{path}: no offsetTable object")
        return {}
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in table.items():
        topic, sep, group = str(key).partition("@")
        if not sep or not isinstance(queues, dict):
            notes.append(f"{path}: entry {key!r} is not 'topic@group' -> {{queue: offset}}")
            continue
        try:
            out[(topic, group)] = {int(q): int(o) for q, o in queues.items()}
        except (TypeError, ValueError):
            notes.append(f"{path}: entry {key!r} has a non-integer queue or offset")
    return out


# -- split points ------------------------------------------------------------------------------
def split_points(layout: ReplicaLayout, split_bytes: int) -> dict[int, list[int]]:
    """{commitlog file base: [candidate record offsets inside the file]} for every file larger
    than `split_bytes`: for each target base + k*split_bytes, the smallest physical offset a
    consume queue unit points at that is >= the target and below the next target."""
    big = [f for f in layout.commitlog if split_bytes > 0 and f.size > split_bytes]
    if not big:
        return {}
    targets = sorted(f.base + k * split_bytes for f in big for k in range(1, -(-f.size // split_bytes)))
    best: list[int | None] = [None] * len(targets)
    by_queue: dict[tuple[str, int], list[CQFile]] = {}
    for cf in layout.cq_files:
        by_queue.setdefault((cf.topic, cf.queue_id), []).append(cf)
    for (topic, qid), files in by_queue.items():
        q = QueueFiles(topic, qid, os.path.dirname(files[0].path))
        try:
            _first_units_at_or_after(q, targets, best)
        finally:
            q.close()
    out: dict[int, list[int]] = {}
    for f in big:
        cuts: list[int] = []
        for k in range(1, -(-f.size // split_bytes)):
            i = bisect.bisect_left(targets, f.base + k * split_bytes)
            c = best[i]
            if c is not None and c < min(f.end, targets[i] + split_bytes) and (not cuts or c > cuts[-1]):
                cuts.append(c)
        if cuts:
            out[f.base] = cuts
    return out


def _first_units_at_or_after(q: QueueFiles, targets: list[int], best: list[int | None]) -> None:
    if not q.files:
        return
    lo_index = q.files[0].base // CQ_STORE_UNIT_SIZE
    hi_index = q.max_offset()

    def phys(index: int) -> int:
        unit = q.unit(index)
        if unit is None or not is_valid(unit):
            return 1 << 62  # unwritten: past every target
        return -1 if is_filler(unit) else unit[0]

    for t, target in enumerate(targets):
        lo, hi = lo_index, hi_index
        while lo < hi:  # first index whose unit points at or after the target
            mid = (lo + hi) // 2
            if phys(mid) < target:
                lo = mid + 1
            else:
                hi = mid
        if lo < hi_index:
            p = phys(lo)
            if p < (1 << 62) and (best[t] is None or p < best[t]):
                best[t] = p
