"""64-bit digests computed on the executors.

A bucket is a range of bucket_bytes of physical offsets. Per (replica, bucket) the executors
XOR together one hash per record (`record_hash`) and one per consume-queue expectation
(`cq_hash`, from a record on one side and from a unit on the other). Two replicas with the
same digest and count in a bucket hold the same records there; a replica whose record side and
unit side agree in a bucket has exactly one correct unit per dispatchable record there. Only
buckets whose digests differ are decoded again into record rows ("dirty" buckets).

The hashes are CPython's tuple/str hashes: cheap, and identical in every Python worker of one
Spark application because PySpark gives the executors one PYTHONHASHSEED (the driver's, or 0).
Digests are only compared within one run. `require_fixed_seed` refuses to run without it.
"""
from __future__ import annotations

import os

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # its units carry a delivery time, not a tag hash


def require_fixed_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") in (None, "random"):
        raise RuntimeError("digests need a fixed PYTHONHASHSEED in every worker (PySpark sets it "
                           "for executors; set it when calling the executor functions directly)")


def record_hash(phys: int, size: int, rec_crc: int, corrupt: bool) -> int:
    """What two replicas must agree on at an offset: size, whole-record CRC, validity."""
    return hash((phys, size, rec_crc, corrupt))


def cq_hash(phys: int, topic: str, queue_id: int, queue_offset: int, size: int, tag: int) -> int:
    """What a unit and the record it points at must agree on (no tag for the schedule topic)."""
    return hash((phys, topic, queue_id, queue_offset, size, 0 if topic == SCHEDULE_TOPIC else tag))


def key_hash(uniq_key: str) -> int:
    """Hash of a unique key: equal keys hash equal; records whose hash repeats in a queue are
    only candidates, decoded again and compared on the keys themselves."""
    return hash(uniq_key)
