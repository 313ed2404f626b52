"""Executor side, pass 1: one sweep over every record that keeps record data in the task and
emits only the SUMMARY_COLUMNS rows described in cluster.audit.scan (end, resplit, corrupt,
digest, qgap, qedge, keys, table). Records are checked and parsed by store.codec only, along
store.commitlog.commitlog_walk."""
from __future__ import annotations

import zlib
from typing import Iterator

from store import codec
from store.codec.dispatch import delay_level_lookup
from store.commitlog.commitlog_walk import CommitLogWalk

from cluster.audit import digest
from cluster.audit.scan import (CORRUPT, DEFAULT_DELAY_LEVELS_MS, DIGEST, KEYS, QEDGE, QGAP, TABLE_TOPICS,
                   CommitLogTask, _bad_start, _end, _opened, _range_end, _resplit, _stop, _tag_hash,
                   table_row)

_TX_MASK = codec.SysFlag.TRANSACTION_MASK
_PREPARED, _ROLLBACK = codec.SysFlag.TRANSACTION_PREPARED_TYPE, codec.SysFlag.TRANSACTION_ROLLBACK_TYPE


def summarize(task: CommitLogTask, bucket_bytes: int,
              delay_levels=DEFAULT_DELAY_LEVELS_MS) -> Iterator[tuple]:
    """SUMMARY_COLUMNS rows of one task."""
    replica, base = task.replica, task.base

    def body(view, size):
        why = _bad_start(view, size, task)
        if why:
            yield _resplit(task, why)
            return
        fields, crc32 = codec.decode_dispatch_fields, zlib.crc32
        record_hash, cq_hash, key_hash = digest.record_hash, digest.cq_hash, digest.key_hash
        uniq = codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
        delay_ms = delay_level_lookup(delay_levels)
        tables = TABLE_TOPICS
        digest.require_fixed_seed()
        tags: dict[str, int] = {}
        # (topic, queue) -> [first phys, first qo, last qo, last phys, key hashes, offsets]
        queues: dict[tuple[str, int], list] = {}
        bucket = None
        b_first = b_n = b_x = b_cn = b_cx = 0
        count = 0
        ended: list = []  # [(position where the walk ended, _stop's tuple or None)]
        for phys, n in _walk(task, view, size, delay_ms, ended):
            if phys // bucket_bytes != bucket:
                if bucket is not None:
                    yield _digest(task, b_first, bucket, b_n, b_x, b_cn, b_cx)
                bucket, b_first, b_n, b_x, b_cn, b_cx = phys // bucket_bytes, phys, 0, 0, 0, 0
            if n is None:  # the corrupt record the walk stopped at belongs to its bucket
                rec = ended[0][1][3]
                b_n += 1
                b_x ^= record_hash(phys, rec[0] if rec else 0, rec[1] if rec else 0, True)
                yield (replica, base, CORRUPT, phys, rec and rec[3], rec and rec[4], rec and rec[5],
                       rec and rec[0], None, None, None, None, ended[0][1][2], None, None)
                break
            pos = phys - base
            qid, qo, sf, ts, _, topic, props = fields(view, pos, n)
            b_n += 1
            b_x ^= record_hash(phys, n, crc32(view[pos:pos + n]), False)
            if (sf & _TX_MASK) not in (_PREPARED, _ROLLBACK):
                b_cn += 1
                b_cx ^= cq_hash(phys, topic, qid, qo, n, _tag_hash(topic, props, ts, tags, delay_ms))
                q = queues.get((topic, qid))
                if q is None:
                    q = queues[(topic, qid)] = [phys, qo, qo - 1, None, [], []]
                if qo != q[2] + 1:
                    yield (replica, base, QGAP, phys, topic, qid, qo, q[2], q[3], None, None, None,
                           None, None, None)
                q[2], q[3] = qo, phys
                if topic in tables:
                    yield table_row(task, view, pos, n, topic, qid, qo, props)
                key = props.get(uniq)
                if key is not None:
                    q[4].append(key_hash(key))
                    q[5].append(phys)
            count += 1
        if bucket is not None:
            yield _digest(task, b_first, bucket, b_n, b_x, b_cn, b_cx)
        for (topic, qid), (fp, fq, lq, lp, hashes, offsets) in queues.items():
            yield (replica, base, QEDGE, fp, topic, qid, fq, lq, lp, None, None, None, None, None, None)
            if hashes:
                yield (replica, base, KEYS, fp, topic, qid, None, None, None, None, None, None, None,
                       hashes, offsets)
        end_pos, stop = ended[0]
        if stop is not None:
            yield _end(task, base + stop[0], stop[1], count, stop[2])
        else:
            yield from _range_end(task, end_pos, size, count, 0)

    yield from _opened(task, body)


def _walk(task: CommitLogTask, view, size: int, delay_ms, ended: list) -> Iterator[tuple]:
    """(phys, size) of the records of the task's range (store.commitlog.commitlog_walk, CRC checked),
    then (phys, None) for the record the walk stopped at when it is not a BLANK or EMPTY (its
    bucket counts it); `ended` receives (position where the walk ended, scan._stop's tuple)."""
    walk = CommitLogWalk(check_crc=True)
    yield from walk.file(view, task.base, task.start, size, size, min(task.end, size))
    stop = _stop(walk, view, size, delay_ms)
    ended.append((walk.offset - task.base, stop))
    if stop is not None and stop[1] not in ("BLANK", "EMPTY"):
        yield task.base + stop[0], None


def _digest(task: CommitLogTask, first: int, bucket: int, n: int, x: int, cn: int, cx: int) -> tuple:
    return (task.replica, task.base, DIGEST, first, None, None, None, bucket, n, x, cn, cx, None, None, None)


def summarize_bins(task_bins, bucket_bytes: int, delay_levels=DEFAULT_DELAY_LEVELS_MS) -> Iterator[tuple]:
    """mapPartitions function: the summary rows of every task of every bin of the partition."""
    for bin_ in task_bins:
        for task in bin_:
            yield from summarize(CommitLogTask(*task), bucket_bytes, delay_levels)
