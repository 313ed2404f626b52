"""`python -m store verify`: the consistency check of a store directory, read-only.

Pass 1 walks every record of the commitlog with CRC checks and matches it with its consume queue
unit; pass 2 walks every consume queue unit and checks those pass 1 did not match; then a sample
of the records' keys is looked up in the index. Damage and warnings are collected in Findings,
counted by kind with the first examples of each.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from store import codec
from store.codec import RecordKind
from store.config import StoreConfig
from store.queue.consume_queue import CQ_STORE_UNIT_SIZE, FILLER_SIZE
from store.codec.dispatch import SCHEDULE_TOPIC, DispatchRequest, build_request, delay_level_lookup
from .findings import Findings
from store.index.index_file import INDEX_HEADER_SIZE
from store.index.index_service import build_key
from . import QueueFiles, ScanResult, StoreReader
from .store_reader import tail_after
from common.text_output import Progress, human_bytes

_ZERO_UNIT = (0, 0, 0)


@dataclass
class _QueueState:
    q: QueueFiles
    first_index: int
    end_index: int
    verified: bytearray  # 1 for each unit pass 1 matched with its record


def verify_store(reader: StoreReader, *, index_sample: int = 1000,
                 progress: Progress | None = None) -> dict[str, Any]:
    """Check every record's CRC, every consume queue unit against its record and a sample of
    the records' keys against the index; the report is a JSON-ready dict (the --json output),
    `ok` False when anything is damaged."""
    return _Verification(reader, index_sample, progress or Progress(False)).run()


class _Verification:
    """One verify_store: the passes in order, and what they hand each other."""

    def __init__(self, reader: StoreReader, index_sample: int, progress: Progress) -> None:
        self.reader = reader
        self.index_sample = index_sample
        self.progress = progress
        self.findings = Findings()
        self.total_units = 1  # units of every queue, for the progress line of pass 2
        self.delay_level_ms = delay_level_lookup(
            StoreConfig(store_path_root_dir=reader.root).delay_levels_ms())
        self.cl_min = reader.min_offset()
        self.queues: dict[tuple[str, int], _QueueState] = {}
        self.dispatched_end = 0
        # pass 1: the walk, the records sampled for the index pass, counts, the tail
        self.scan = ScanResult()
        self.sample: list[tuple[int, str, list[str]]] = []  # (offset, topic, keys)
        self.rng = random.Random(0)
        self.seen_for_sample = self.pending = self.checked_units = self.prepared = self.late = 0
        self.valid_end = self.tail_nonzero = 0
        self.tail: dict[str, Any] = {}
        # pass 2 and the index pass
        self.units_seen = self.fillers_mid = self.expired = 0
        self.beyond: Counter[str] = Counter()  # units past a damaged valid end, per queue
        self.index_info: dict[str, Any] = {}

    def run(self) -> dict[str, Any]:
        self.check_file_sizes()
        self.load_queues()
        self.commitlog_pass()
        self.check_tail()
        self.progress.done()
        self.total_units = sum(s.end_index - s.first_index for s in self.queues.values()) or 1
        for (topic, qid), qs in self.queues.items():
            self.queue_pass(topic, qid, qs)
        self.report_queues()
        self.progress.done()
        self.index_pass()
        self.progress.done()
        return self.report()

    # ---- layout --------------------------------------------------------------------------
    def check_file_sizes(self) -> None:
        reader, findings = self.reader, self.findings
        files = reader.commitlog_files
        for f in files[:-1]:
            if f.size != reader.file_size:
                findings.damage("commitlog.file_size", f"commitlog file {f.name} has {f.size} "
                                f"bytes, the first file {reader.file_size}", file=f.name)
        if files and files[-1].size != reader.file_size:
            findings.warn("commitlog.file_size", f"last commitlog file {files[-1].name} has "
                          f"{files[-1].size} bytes, the first {reader.file_size} (interrupted "
                          f"creation?)", file=files[-1].name)

    def load_queues(self) -> None:
        """Consume queue layout, and the dispatched end (the newest record a unit points at)."""
        findings = self.findings
        for q in self.reader.queues():
            if not q.files:
                continue
            sizes = {f.size for f in q.files}
            if len(sizes) > 1:
                findings.damage("cq.file_size", f"{q.name}: files of different sizes "
                                f"{sorted(sizes)}", topic=q.topic, queue_id=q.queue_id)
            for f in q.files:
                if f.size % CQ_STORE_UNIT_SIZE or f.base % CQ_STORE_UNIT_SIZE:
                    findings.damage("cq.file_size", f"{q.name}: file {f.name} ({f.size} bytes) is "
                                    f"not aligned to 20-byte units", topic=q.topic,
                                    queue_id=q.queue_id)
            first_index = q.files[0].base // CQ_STORE_UNIT_SIZE
            end_index = q.max_offset()
            self.queues[(q.topic, q.queue_id)] = _QueueState(
                q, first_index, end_index, bytearray(max(0, end_index - first_index)))
            last = q.last_real()
            if last is not None:
                self.dispatched_end = max(self.dispatched_end, last[1][0] + last[1][1])

    # ---- pass 1: every record (CRC) and its consume queue unit ------------------------------
    def commitlog_pass(self) -> None:
        reader, scan, cl_min = self.reader, self.scan, self.cl_min
        total_bytes = max(1, reader.files_end() - cl_min)
        for offset, f, pos, n in reader.scan(None, check_crc=True, result=scan):
            self.progress.update(lambda: f"verify: commitlog {human_bytes(offset - cl_min)} / "
                                         f"{human_bytes(total_bytes)} "
                                         f"({100 * (offset - cl_min) // total_bytes}%), "
                                         f"{scan.records} records")
            req = build_request(f.view, pos, n, offset, self.delay_level_ms)
            if not req.dispatchable:
                self.prepared += 1
                continue
            self.sample_keys(offset, req)
            self.match_unit(offset, n, req)
        # A running store may have appended since: follow the records that appeared meanwhile.
        if scan.stop_kind is RecordKind.EMPTY and reader.live:
            more = ScanResult()
            for _ in reader.scan(scan.valid_end, check_crc=True, result=more):
                self.late += 1
            if self.late:
                scan.valid_end = more.valid_end
                scan.stop_kind, scan.stop_reason = more.stop_kind, more.stop_reason
        self.valid_end = scan.valid_end

    def sample_keys(self, offset: int, req: DispatchRequest) -> None:
        """Reservoir sample of the records with keys, for the index pass."""
        keys = ([req.uniq_key] if req.uniq_key else []) + [k for k in req.keys.split(" ") if k]
        if not keys:
            return
        self.seen_for_sample += 1
        if self.index_sample <= 0 or len(self.sample) < self.index_sample:
            self.sample.append((offset, req.topic, keys))
        else:
            j = self.rng.randrange(self.seen_for_sample)
            if j < self.index_sample:
                self.sample[j] = (offset, req.topic, keys)

    def match_unit(self, offset: int, n: int, req: DispatchRequest) -> None:
        qs = self.queues.get((req.topic, req.queue_id))
        unit = qs.q.unit(req.consume_queue_offset) if qs is not None else None
        where = f"{req.topic}-{req.queue_id}@{req.consume_queue_offset}"
        if unit is None or unit == _ZERO_UNIT:
            if offset >= self.dispatched_end:
                self.pending += 1
            else:
                self.findings.damage("cq.missing_unit", f"record at {offset} ({where}) has no "
                                     f"consume queue unit", offset=offset, topic=req.topic,
                                     queue_id=req.queue_id, queue_offset=req.consume_queue_offset)
            return
        assert qs is not None
        tags_ok = req.topic == SCHEDULE_TOPIC or unit[2] == req.tags_code
        if unit[0] == offset and unit[1] == n and tags_ok:
            self.checked_units += 1
            i = req.consume_queue_offset - qs.first_index
            if 0 <= i < len(qs.verified):
                qs.verified[i] = 1
        else:
            self.findings.damage("cq.unit_mismatch", f"record at {offset} size {n} tagsCode "
                                 f"{req.tags_code} ({where}): its unit holds phy {unit[0]} size "
                                 f"{unit[1]} tagsCode {unit[2]}", offset=offset, topic=req.topic,
                                 queue_id=req.queue_id, queue_offset=req.consume_queue_offset)

    def check_tail(self) -> None:
        """What pass 1 learnt about the commitlog itself: offset fields, BLANKs, files, and
        what lies after the valid end."""
        reader, scan, findings, valid_end = self.reader, self.scan, self.findings, self.valid_end
        for off, stored in scan.offset_mismatches:
            findings.damage("commitlog.offset_field", f"record at {off} stores physicalOffset "
                            f"{stored}", offset=off)
        extra = scan.offset_mismatch_count - len(scan.offset_mismatches)
        for _ in range(max(0, extra)):
            findings.damage("commitlog.offset_field", "record stores a wrong physicalOffset")
        for off, size, want in scan.blank_mismatches:
            findings.damage("commitlog.blank", f"end-of-file blank at {off} says {size} bytes, "
                            f"{want} remain in the file", offset=off)
        tail_nonzero, tail_first, tail_bytes = tail_after(reader, valid_end)
        self.tail_nonzero = tail_nonzero
        self.tail = tail = {
            "valid_end": valid_end,
            "stop": scan.stop_kind.name if scan.stop_kind else "END_OF_FILES",
            "stop_reason": scan.stop_reason, "bytes_after": tail_bytes,
            "nonzero_bytes_after": tail_nonzero, "first_nonzero_after": tail_first}
        if scan.gap is not None:
            findings.damage("commitlog.gap", f"commitlog files are not contiguous: expected a file "
                            f"at {scan.gap[0]}, found {scan.gap[1]}", offset=scan.gap[0])
        if tail_nonzero:
            bad = valid_end if scan.stop_kind not in (None, RecordKind.EMPTY) else tail_first
            later = sum(1 for f in reader.commitlog_files if f.base > valid_end and f.size >= 8
                        and codec.check_record(f.view, 0, f.size, True)[0] is RecordKind.RECORD)
            findings.damage(
                "commitlog.damage",
                f"first bad offset {bad}: {scan.stop_reason}; {reader.files_end() - bad} bytes "
                f"follow it ({tail_nonzero} non-zero)"
                + (f"; {later} later file(s) start with a valid record" if later else ""),
                offset=bad, bytes_after=reader.files_end() - bad, nonzero_bytes_after=tail_nonzero,
                reason=scan.stop_reason)
            tail["bad_offset"] = bad

    # ---- pass 2: every consume queue unit --------------------------------------------------
    def queue_pass(self, topic: str, qid: int, qs: _QueueState) -> None:
        findings, q, total_units = self.findings, qs.q, self.total_units
        prev_phy = -1
        real_seen = False
        zero_from: int | None = None
        expected_base = q.files[0].base
        for f in q.files:
            if f.base != expected_base:
                findings.damage("cq.hole", f"{q.name}: file {f.name} does not follow the previous "
                                f"file (expected offset {expected_base})", topic=topic, queue_id=qid)
            expected_base = f.end
            end = q.written_end(f)
            for index, unit in q.iter_units(f):
                self.units_seen += 1
                self.progress.update(lambda: f"verify: consume queues {self.units_seen}/"
                                             f"{total_units} units")
                phy, size, tcode = unit
                if unit == _ZERO_UNIT:
                    if zero_from is None:
                        zero_from = index
                    continue
                if zero_from is not None:
                    findings.damage("cq.hole", f"{q.name}: unwritten units {zero_from}..{index - 1} "
                                    f"before unit {index}", topic=topic, queue_id=qid, index=index)
                    zero_from = None
                if phy == 0 and size == FILLER_SIZE:
                    if real_seen:
                        self.fillers_mid += 1
                    continue
                if phy < 0 or size <= 0:
                    findings.damage("cq.bad_unit", f"{q.name}@{index}: invalid unit (phy {phy}, "
                                    f"size {size})", topic=topic, queue_id=qid, index=index)
                    continue
                real_seen = True
                if phy <= prev_phy:
                    findings.damage("cq.order", f"{q.name}@{index}: phy {phy} not after the "
                                    f"previous unit's {prev_phy}", topic=topic, queue_id=qid,
                                    index=index)
                prev_phy = phy
                self.check_unmatched(qs, topic, qid, index, unit)
            if end < f.size and zero_from is None:
                zero_from = (f.base + end) // CQ_STORE_UNIT_SIZE

    def check_unmatched(self, qs: _QueueState, topic: str, qid: int, index: int,
                        unit: tuple[int, int, int]) -> None:
        """A real unit: fine when pass 1 matched it, else checked against the commitlog."""
        phy, size, _ = unit
        i = index - qs.first_index
        if 0 <= i < len(qs.verified) and qs.verified[i]:
            return
        if phy < self.cl_min:
            self.expired += 1
            return
        if self.tail_nonzero and phy + size > self.valid_end:
            self.beyond[qs.q.name] += 1
            return
        problem = _check_unit(self.reader, topic, qid, index, unit, self.valid_end,
                              self.delay_level_ms)
        if problem:
            self.findings.damage("cq.bad_unit", f"{qs.q.name}@{index} (phy {phy} size {size}): "
                                 f"{problem}", topic=topic, queue_id=qid, index=index, offset=phy)

    def report_queues(self) -> None:
        findings, beyond = self.findings, self.beyond
        if beyond:
            total_beyond = sum(beyond.values())
            findings.damage("cq.past_valid_end", f"{total_beyond} consume queue unit(s) in "
                            f"{len(beyond)} queue(s) point past the commitlog's valid end "
                            f"{self.valid_end} (recovery would cut them): " + ", ".join(
                                f"{name}: {n}" for name, n in sorted(beyond.items())),
                            count=total_beyond, offset=self.valid_end)
        if self.fillers_mid:
            findings.warn("cq.fillers", f"{self.fillers_mid} filler unit(s) inside queues (gaps "
                          f"in queue offsets filled by the store)")
        if self.pending:
            findings.warn("cq.pending", f"{self.pending} record(s) at the end of the commitlog "
                          f"are not dispatched to the consume queues yet (reput behind; the store "
                          f"catches up on start)")

    # ---- index: keys of a sample of records --------------------------------------------------
    def index_pass(self) -> None:
        findings, sample = self.findings, self.sample
        index_readers = self.reader.index_files()
        self.index_info = index_info = {"files": len(index_readers), "sampled_records": 0,
                                        "keys_checked": 0, "keys_missing": 0, "not_indexed_yet": 0}
        usable = [ix for ix in index_readers if ix.entries > 0]
        unknown = [ix for ix in index_readers if ix.slots is None and ix.size > INDEX_HEADER_SIZE]
        for ix in unknown:
            findings.warn("index.geometry", f"index file {ix.name}: cannot tell its hash slot "
                          f"count from its size ({ix.size} bytes); not checked", file=ix.name)
        for ix in index_readers:
            if ix.size < INDEX_HEADER_SIZE:
                findings.damage("index.file", f"index file {ix.name} is only {ix.size} bytes",
                                file=ix.name)
        if not index_readers:
            index_info["note"] = "no index files (messageIndexEnable=false or nothing indexed)"
            return
        if not usable:
            return
        covered_from = min(ix.header.begin_phy_offset for ix in usable if ix.header)
        covered_to = max(ix.header.end_phy_offset for ix in usable if ix.header)
        sample.sort()
        for n_done, (phy, topic, keys) in enumerate(sample, 1):
            self.progress.update(lambda: f"verify: index {n_done}/{len(sample)} records")
            if phy < covered_from or phy >= self.valid_end:
                continue
            if phy > covered_to:
                index_info["not_indexed_yet"] += 1
                continue
            index_info["sampled_records"] += 1
            candidates = [ix for ix in reversed(usable) if ix.slots is not None
                          and ix.header is not None and ix.header.begin_phy_offset <= phy]
            for key in keys:
                index_info["keys_checked"] += 1
                full = build_key(topic, key)
                if not any(phy in set(ix.lookup(full)) for ix in candidates):
                    index_info["keys_missing"] += 1
                    findings.damage("index.missing_key", f"key {full!r} of the record at {phy} "
                                    f"is not in the index", offset=phy, key=full)
        if index_info["not_indexed_yet"]:
            findings.warn("index.pending", f"{index_info['not_indexed_yet']} sampled record(s) "
                          f"are past the index's end (not indexed yet)")

    # ---- the report ------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        reader, findings, scan, valid_end = self.reader, self.findings, self.scan, self.valid_end
        commitlog = {"files": len(reader.commitlog_files), "file_size": reader.file_size,
                     "min_offset": self.cl_min, "records": scan.records + self.late,
                     "bytes": scan.bytes, "prepared_or_rollback": self.prepared,
                     "valid_end": valid_end, "files_end": reader.files_end(), "tail": self.tail}
        cq = {"queues": len(self.queues), "units": self.units_seen,
              "units_matching_records": self.checked_units, "pending_records": self.pending,
              "expired_units": self.expired, "dispatched_end": self.dispatched_end}
        n_damage = sum(findings.damage_counts.values())
        if findings.damaged:
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(findings.damage_counts.items()))
            summary = (f"verify: DAMAGED - {n_damage} problem(s) ({kinds}); commitlog valid end "
                       f"{valid_end}")
        else:
            summary = (f"verify: OK - {commitlog['records']} records, {len(self.queues)} queues "
                       f"({self.units_seen} units), {self.index_info['keys_checked']} index keys "
                       f"checked; commitlog valid end {valid_end}")
        return {"store": reader.root, "ok": not findings.damaged, "live": reader.live,
                "commitlog": commitlog, "consume_queues": cq, "index": self.index_info,
                "damage_counts": dict(findings.damage_counts),
                "warning_counts": dict(findings.warning_counts),
                "issues": findings.issues(), "summary": summary}


def _check_unit(reader: StoreReader, topic: str, qid: int, index: int,
                unit: tuple[int, int, int], valid_end: int,
                delay_level_ms: Callable[[int], int]) -> str | None:
    """Why a unit not matched in pass 1 is wrong, or None when it is fine."""
    phy, size, tcode = unit
    f = reader.file_for(phy)
    if f is None:
        return "points outside the commitlog files"
    pos = phy - f.base
    # Below the valid end CRCs were checked in pass 1; past it (a running store appended since)
    # check them here.
    kind, total = codec.check_record(f.view, pos, f.size, phy + size > valid_end)
    if kind is not RecordKind.RECORD:
        return f"no valid record there ({kind.name})"
    if codec.physical_offset_at(f.view, pos) != phy:
        return "not the start of a record"
    if total != size:
        return f"the record there has {total} bytes"
    req = build_request(f.view, pos, total, phy, delay_level_ms)
    if (req.topic, req.queue_id) != (topic, qid):
        return f"the record there belongs to {req.topic}-{req.queue_id}"
    if not req.dispatchable:
        return "the record there is a prepared/rollback transaction record"
    if req.consume_queue_offset != index:
        return f"the record there has queue offset {req.consume_queue_offset}"
    if topic != SCHEDULE_TOPIC and req.tags_code != tcode:
        return f"tagsCode {tcode} but the record's tag hashes to {req.tags_code}"
    return None
