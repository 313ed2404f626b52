"""Store benchmarks: put path against the CPython ceiling, SYNC_FLUSH, reput, recovery, restart.

    python -m tests.perf.bench_store [--quick] [--only put,batch] [--json out.json]
                                     [--compare old.json [--against new.json]] [--profile]

Every message has a 1 KiB body, goes to one topic with 8 queues and carries TAGS, KEYS (one token)
and UNIQ_KEY (32 hex characters) like a real producer's. Stores live in a temporary directory on
the repository's disk (never /dev/shm) and are removed afterwards.

The machine is shared and noisy: absolute figures move between runs, so compare the ratios that
are measured side by side in one run (put / raw ceiling, mmap / pwrite), and use --compare to put
two runs' JSON next to each other. See docs/performance/benchmarks.md.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import math
import mmap
import os
import platform
import pstats
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
import zlib
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

from common.text_output import format_table
from store import codec, recovery
from store import running_flags as rf
from store.codec import Message
from store.config import StoreConfig
from store.commitlog.fileio import DEFAULT_FILE_IO, FileIO
from store.layout import ABORT_FILE
from store.commitlog.mapped_file_queue import MappedFileQueue
from store.message_store import MessageStore
from tests.perf import group_commit_floor, small_msync
from tests.perf.small_msync import preallocated_mmap
from tests.perf.host_load import CpuWindow
from store.put_result import PutStatus
from store.validation import check_message

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPIC = "BenchTopic"
QUEUES = 8
BODY_SIZE = 1024
BATCH = 32
SYNC_THREADS = 8
SYNC_PREFILL_MIB = 64  # written before each SYNC_FLUSH run starts timing
BORN_HOST = "10.0.0.5:50412"
STORE_HOST = "127.0.0.1:10911"
TAGS = ("TagA", "TagB", "TagC", "TagD")
CHUNK = 256  # iterations between two clock reads in the timed loops
MiB = 1 << 20
BENCHMARKS = ("raw", "put", "batch", "sync", "reput", "recovery")


# -- sizes ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    seconds: float  # duration of each throughput measurement
    pool: int  # distinct messages cycled through by the put loops (power of two)
    raw_max: int  # records of the raw ceiling's fresh file
    put_max: int  # cap on messages of one put measurement (stays inside one 1 GiB file)
    sync_seconds: float
    lat_samples: int  # 4 KiB write+sync samples per mode
    reput_messages: int
    store_mib: int  # size of the restart store
    store_file_mib: int  # commitlog file size of the restart store


QUICK = Sizes(seconds=0.5, pool=16384, raw_max=150_000, put_max=300_000, sync_seconds=1.0,
              lat_samples=300, reput_messages=40_000, store_mib=128, store_file_mib=32)
FULL = Sizes(seconds=2.0, pool=65536, raw_max=800_000, put_max=800_000, sync_seconds=3.0,
             lat_samples=2000, reput_messages=60_000, store_mib=1024, store_file_mib=1024)


# -- results -------------------------------------------------------------------------------------
@dataclass
class Result:
    key: str
    label: str
    value: float
    unit: str
    target: float | None = None
    higher_is_better: bool = True
    note: str = ""

    @property
    def status(self) -> str:
        if self.target is None or self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return "info"
        ok = self.value >= self.target if self.higher_is_better else self.value < self.target
        return "PASS" if ok else "MISS"


class Context:
    def __init__(self, sizes: Sizes, root: str, profile: bool, profile_top: int) -> None:
        self.sizes = sizes
        self.root = root
        self.profile = profile
        self.profile_top = profile_top
        self.results: dict[str, Result] = {}
        self.profiles: list[tuple[str, pstats.Stats | None, dict[str, pstats.Stats]]] = []
        self.last_per_round = float("nan")  # messages per flush round of the last SYNC_FLUSH run
        self._pool: list[Message] | None = None
        self._seq = 0

    def add(self, key: str, label: str, value: float, unit: str, target: float | None = None,
            higher_is_better: bool = True, note: str = "") -> Result:
        r = Result(key, label, value, unit, target, higher_is_better, note)
        self.results[key] = r
        print(f"  {label}: {fmt_value(value, unit)} {unit}"
              + (f"  [{r.status}, target {'>=' if higher_is_better else '<'} {fmt_value(target, unit)}]"
                 if target is not None else "") + (f"  ({note})" if note else ""), flush=True)
        return r

    def tmpdir(self, name: str) -> str:
        return tempfile.mkdtemp(prefix=f"{name}-", dir=self.root)

    @property
    def pool(self) -> list[Message]:
        if self._pool is None:
            self._pool = [self.new_message() for _ in range(self.sizes.pool)]
        return self._pool

    def new_message(self) -> Message:
        i = self._seq
        self._seq += 1
        return make_message(i)

    def batches(self, n_messages: int, size: int = BATCH) -> Iterator[list[Message]]:
        """Fresh (unique keys) messages in batches, for fills that are not timed."""
        left = n_messages
        while left > 0:
            k = min(size, left)
            yield [self.new_message() for _ in range(k)]
            left -= k

    # -- profiling ----------------------------------------------------------------------------
    def measure(self, label: str) -> "_Measure":
        return _Measure(self, label)


_BODY = os.urandom(BODY_SIZE)
_BORN_MS = int(time.time() * 1000)


def make_message(i: int) -> Message:
    """A message as a real producer sends it: TAGS, one KEYS token, a 32-hex-char UNIQ_KEY."""
    return Message(TOPIC, _BODY, i % QUEUES,
                   {"TAGS": TAGS[i % len(TAGS)], "KEYS": f"order-{i:012d}",
                    "UNIQ_KEY": uuid.uuid4().hex.upper()},
                   born_timestamp=_BORN_MS, born_host=BORN_HOST, store_host=STORE_HOST)


def record_size() -> int:
    return len(codec.encode(make_message(0)).data)


def fmt_value(v: float | None, unit: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if unit in ("x",):
        return f"{v:.3f}"
    if unit in ("s", "ms", "us"):
        return f"{v:,.3f}" if v < 10 else f"{v:,.1f}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:,.1f}"


# -- profiling support -------------------------------------------------------------------------
_PROFILING = threading.Event()  # background services profile their steps while set
_BG_PROFILES: list[tuple[str, cProfile.Profile]] = []
_BG_LOCK = threading.Lock()
_WORKER_PROFILES: list[cProfile.Profile] = []


def _install_service_profiler() -> None:
    """Profile each background service's step() while _PROFILING is set (a runtime wrapper of
    Service._run in this process only; the store's files are not touched)."""
    from common import service

    log = logging.getLogger("common.service")

    def _run(self) -> None:
        prof = cProfile.Profile()
        with _BG_LOCK:
            _BG_PROFILES.append((self.name, prof))
        while not self._stopping.is_set():
            on = _PROFILING.is_set()
            if on:
                prof.enable()
            try:
                self.step()
            except Exception:
                log.exception("%s step failed", self.name)
            finally:
                if on:
                    prof.disable()
            self._wake.wait(self.wait_interval())
            self._wake.clear()

    service.Service._run = _run


class _Measure:
    """Context manager around a timed section: with --profile, the calling thread, the worker
    threads that register with worker_profile() and the store's service threads are profiled."""

    def __init__(self, ctx: Context, label: str) -> None:
        self.ctx = ctx
        self.label = label
        self.prof: cProfile.Profile | None = None

    def __enter__(self) -> "_Measure":
        gc.collect()
        if self.ctx.profile:
            with _BG_LOCK:
                for _, p in _BG_PROFILES:
                    p.clear()  # drop what the services did before this section
            _WORKER_PROFILES.clear()
            self.prof = cProfile.Profile()
            _PROFILING.set()
            self.prof.enable()
        return self

    def __exit__(self, *exc) -> None:
        if self.prof is None:
            return
        self.prof.disable()
        _PROFILING.clear()
        fg = _stats([self.prof] + list(_WORKER_PROFILES))
        _WORKER_PROFILES.clear()
        bg: dict[str, pstats.Stats] = {}
        with _BG_LOCK:
            by_name: dict[str, list[cProfile.Profile]] = {}
            for name, p in _BG_PROFILES:
                by_name.setdefault(name, []).append(p)
            _BG_PROFILES.clear()  # a store started later registers its threads again
        for name, profs in by_name.items():
            s = _stats(profs)
            if s is not None:
                bg[name] = s
        self.ctx.profiles.append((self.label, fg, bg))


def worker_profile() -> cProfile.Profile | None:
    if not _PROFILING.is_set():
        return None
    p = cProfile.Profile()
    _WORKER_PROFILES.append(p)
    return p


def _stats(profs: list[cProfile.Profile]) -> pstats.Stats | None:
    stats = None
    for p in profs:
        try:
            if stats is None:
                stats = pstats.Stats(p)
            else:
                stats.add(p)
        except TypeError:  # a profile that saw no calls
            continue
    return stats


# -- helpers -------------------------------------------------------------------------------------
def evict_from_page_cache(directory: str) -> None:
    """Drop this store's (clean) file pages from the page cache: a cold restart, no root needed
    and nothing else on the machine is touched."""
    for dirpath, _, names in os.walk(directory):
        for n in names:
            path = os.path.join(dirpath, n)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q / 100.0 * (len(s) - 1))))]


class NoSyncFileIO(FileIO):
    """Diagnostic only: msync and fdatasync return at once, so a SYNC_FLUSH run shows what the
    put / group-commit / wake-up machinery costs without the disk."""

    def msync(self, mm, offset: int, length: int, path: str) -> None:
        self._check("msync", path)

    def fdatasync(self, fd: int, path: str) -> None:
        self._check("fdatasync", path)


def open_store(directory: str, start: bool = True, io: FileIO = DEFAULT_FILE_IO,
               **changes) -> MessageStore:
    cfg = StoreConfig(store_path_root_dir=directory, **changes)
    store = MessageStore(cfg, io=io)
    if start:
        store.start()
    else:
        # Loaded but not started: no flush, reput or logics-flush thread runs. A store refuses
        # puts until start(); lift only that refusal so it can be filled without reput running.
        store.load()
        store.flags.clear(rf.NOT_STARTED)
    return store


def wait_reput(store: MessageStore, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while store.reput.behind() > 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def fill(ctx: Context, store: MessageStore, n_messages: int) -> int:
    put = store.put_messages
    count = 0
    for batch in ctx.batches(n_messages):
        r = put(batch)
        if r.status is not PutStatus.PUT_OK:
            raise RuntimeError(f"fill failed: {r.status} {r.reason}")
        count += len(batch)
    return count


# -- 1. the CPython ceiling ----------------------------------------------------------------------
def bench_raw(ctx: Context) -> None:
    """Encode one RocketMQ record per iteration (struct.pack_into header with zlib.crc32 of the
    body and a fresh timestamp; body, topic and properties by slice assignment) straight into an
    mmap of a preallocated file: fresh pages (like a new commitlog file) and touched pages."""
    print("[raw] CPython ceiling: pack_into + crc32 + slice copies into an mmap", flush=True)
    sz = ctx.sizes
    sample = make_message(0)
    header = struct.Struct(">iIiiiqqiq4siq4siiqi")
    body = sample.body
    blen = len(body)
    topic_field = bytes([len(TOPIC)]) + TOPIC.encode()
    props = codec.properties_to_string(sample.properties).encode()
    props_field = struct.pack(">h", len(props)) + props
    hsize = header.size
    total = hsize + blen + len(topic_field) + len(props_field)
    born_ip, born_port = codec.parse_host(BORN_HOST)
    store_ip, store_port = codec.parse_host(STORE_HOST)
    born_addr, store_addr = socket.inet_aton(born_ip), socket.inet_aton(store_ip)
    magic = codec.MAGIC_V1
    crc32 = zlib.crc32
    time_ns = time.time_ns
    perf = time.perf_counter
    size = (sz.raw_max * total // mmap.PAGESIZE + 1) * mmap.PAGESIZE
    d = ctx.tmpdir("raw")
    fd, mm = preallocated_mmap(os.path.join(d, "00000000000000000000"), size)
    try:
        def run(limit: int, seconds: float) -> tuple[int, float]:
            pos = 0
            n = 0
            t0 = perf()
            deadline = t0 + seconds
            while n + CHUNK <= limit:
                for _ in range(CHUNK):
                    header.pack_into(mm, pos, total, magic, crc32(body) & 0x7FFFFFFF, n & 7, 0,
                                     n >> 3, pos, 0, _BORN_MS, born_addr, born_port,
                                     time_ns() // 1_000_000, store_addr, store_port, 0, 0, blen)
                    b = pos + hsize
                    mm[b:b + blen] = body
                    b += blen
                    mm[b:b + len(topic_field)] = topic_field
                    b += len(topic_field)
                    mm[b:b + len(props_field)] = props_field
                    pos += total
                    n += 1
                if perf() >= deadline:
                    break
            return n, perf() - t0

        with ctx.measure("raw ceiling (fresh pages)"):
            n_fresh, dt_fresh = run(sz.raw_max, sz.seconds)
        kind, got = codec.check_record(mm, 0, size, True)
        if kind is not codec.RecordKind.RECORD or got != total:
            raise RuntimeError(f"raw ceiling wrote an invalid record: {kind} {got}")
        n_warm, dt_warm = run(n_fresh, sz.seconds)
    finally:
        mm.close()
        os.close(fd)
        shutil.rmtree(d, ignore_errors=True)
    ctx.add("raw_fresh", "raw ceiling, fresh pages", n_fresh / dt_fresh, "rec/s",
            note=f"{total} B records, {n_fresh:,} in {dt_fresh:.2f}s")
    ctx.add("raw_warm", "raw ceiling, touched pages", n_warm / dt_warm, "rec/s")


def bench_encode_only(ctx: Context) -> None:
    """Diagnostic: the store's own validate + encode of a message, no lock, no copy."""
    pool = ctx.pool
    mask = len(pool) - 1
    perf = time.perf_counter
    encode = codec.encode
    n = 0
    t0 = perf()
    deadline = t0 + ctx.sizes.seconds / 2
    with ctx.measure("validate + encode only"):
        while True:
            for _ in range(CHUNK):
                m = pool[n & mask]
                check_message(m, max_body=4 << 20)
                encode(m)
                n += 1
            if perf() >= deadline:
                break
    dt = perf() - t0
    ctx.add("encode_only", "  diag: check_message + codec.encode only", n / dt, "msg/s")


# -- 2. single-thread put ------------------------------------------------------------------------
def _put_single(ctx: Context, started: bool, label: str) -> tuple[float, int, str]:
    sz = ctx.sizes
    pool = ctx.pool
    mask = len(pool) - 1
    d = ctx.tmpdir("put")
    store = open_store(d, start=started)
    try:
        r = store.put_message(pool[0])  # warm-up: creates the commitlog, queue and index files
        if r.status is not PutStatus.PUT_OK:
            raise RuntimeError(f"put failed: {r.status} {r.reason}")
        put = store.put_message
        ok = PutStatus.PUT_OK
        perf = time.perf_counter
        n = failures = 0
        with ctx.measure(label):
            t0 = perf()
            deadline = t0 + sz.seconds
            while n + CHUNK <= sz.put_max:
                for _ in range(CHUNK):
                    if put(pool[n & mask]).status is not ok:
                        failures += 1
                    n += 1
                if perf() >= deadline:
                    break
            dt = perf() - t0
        lag = store.reput.behind()
        note = f"{n:,} msgs; reput {lag / MiB:.1f} MiB behind at the end" if started else f"{n:,} msgs"
        if failures:
            note += f"; {failures} failed puts"
        return n / dt, failures, note
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)


def bench_put(ctx: Context) -> None:
    print("[put] single-thread put_message, ASYNC_FLUSH, store started", flush=True)
    bench_encode_only(ctx)
    rate, _, note = _put_single(ctx, True, "put_message, ASYNC_FLUSH, started")
    ctx.add("put_single", "put_message 1 thread (ASYNC_FLUSH)", rate, "msg/s", note=note)
    raw = ctx.results.get("raw_fresh")
    if raw:
        ctx.add("put_single_ratio", "  ratio put_message / raw (fresh)", rate / raw.value, "x",
                target=0.6)
    rate2, _, note2 = _put_single(ctx, False, "put_message, loaded, no background services")
    ctx.add("put_single_nobg", "  diag: same, store loaded not started (no flush/reput threads)",
            rate2, "msg/s", note=note2)


# -- 3. batch put --------------------------------------------------------------------------------
def _put_batch(ctx: Context, started: bool, label: str) -> tuple[float, str]:
    sz = ctx.sizes
    pool = ctx.pool
    batches = [pool[i:i + BATCH] for i in range(0, len(pool), BATCH)]
    bmask = len(batches) - 1
    d = ctx.tmpdir("batch")
    store = open_store(d, start=started)
    try:
        store.put_messages(batches[0])
        put = store.put_messages
        ok = PutStatus.PUT_OK
        perf = time.perf_counter
        calls = failures = 0
        max_calls = sz.put_max // BATCH
        with ctx.measure(label):
            t0 = perf()
            deadline = t0 + sz.seconds
            while calls + 16 <= max_calls:
                for _ in range(16):
                    if put(batches[calls & bmask]).status is not ok:
                        failures += 1
                    calls += 1
                if perf() >= deadline:
                    break
            dt = perf() - t0
        lag = store.reput.behind()
    finally:
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)
    rate = calls * BATCH / dt
    note = f"{calls * BATCH:,} msgs"
    if started:
        note += f"; reput {lag / MiB:.1f} MiB behind at the end"
    if failures:
        note += f"; {failures} failed calls"
    return rate, note


def bench_batch(ctx: Context) -> None:
    print(f"[batch] put_messages with {BATCH} messages per call, ASYNC_FLUSH, store started", flush=True)
    rate, note = _put_batch(ctx, True, f"put_messages x{BATCH}, ASYNC_FLUSH, started")
    ctx.add("put_batch32", f"put_messages x{BATCH} 1 thread (ASYNC_FLUSH)", rate, "msg/s",
            target=250_000, note=note)
    raw = ctx.results.get("raw_fresh")
    if raw:
        ctx.add("put_batch32_ratio", "  ratio batch put / raw (fresh)", rate / raw.value, "x")
    rate2, note2 = _put_batch(ctx, False, f"put_messages x{BATCH}, loaded, no background services")
    ctx.add("put_batch32_nobg", "  diag: same, store loaded not started (no flush/reput threads)",
            rate2, "msg/s", note=note2)


# -- 4. SYNC_FLUSH, 8 producer threads -----------------------------------------------------------
def _sync_run(ctx: Context, label: str, io: FileIO = DEFAULT_FILE_IO, batch: int = 1,
              **changes) -> tuple[float, float, float, int, int]:
    """8 threads doing put_message (or put_messages of `batch`) for sync_seconds; returns
    (msg/s, p50 ms per call, p99 ms per call, msgs, failures). Also records how many messages
    each flush round covered (`ctx.last_per_round`)."""
    sz = ctx.sizes
    pool = ctx.pool
    per = len(pool) // SYNC_THREADS
    d = ctx.tmpdir("sync")
    store = open_store(d, io=io, flush_disk_type="SYNC_FLUSH", **changes)
    # Untimed: a node's commitlog is rarely fresh, and a fresh file flatters small flushes
    # (the kernel's large folios set in past a few dozen MiB: small_msync.py).
    filler = pool[:BATCH]
    for _ in range((SYNC_PREFILL_MIB << 20) // (BATCH * 1201)):
        if not store.put_messages(filler).ok:
            raise RuntimeError("the SYNC_FLUSH store refused its prefill")
    counts = [0] * SYNC_THREADS
    fails = [0] * SYNC_THREADS
    lats: list[list[float]] = [[] for _ in range(SYNC_THREADS)]
    stop = threading.Event()
    go = threading.Barrier(SYNC_THREADS + 1)

    def worker(k: int) -> None:
        mine = pool[k * per:(k + 1) * per]
        if batch > 1:
            mine = [mine[i:i + batch] for i in range(0, per - batch + 1, batch)]
        size = len(mine)
        put = store.put_message if batch == 1 else store.put_messages
        ok = PutStatus.PUT_OK
        perf = time.perf_counter
        lat = lats[k]
        n = f = 0
        go.wait()
        prof = worker_profile()
        if prof is not None:
            prof.enable()
        try:
            while not stop.is_set():
                t = perf()
                if put(mine[n % size]).status is not ok:
                    f += 1
                lat.append(perf() - t)
                n += 1
        finally:
            if prof is not None:
                prof.disable()
        counts[k] = n
        fails[k] = f

    try:
        r = store.put_message(pool[0])
        if r.status is not PutStatus.PUT_OK:
            raise RuntimeError(f"sync put failed: {r.status} {r.reason}")
        threads = [threading.Thread(target=worker, args=(k,), name=f"producer-{k}")
                   for k in range(SYNC_THREADS)]
        for t in threads:
            t.start()
        with ctx.measure(label):
            rounds0 = getattr(store.flusher, "rounds", 0)
            go.wait()
            t0 = time.perf_counter()
            time.sleep(sz.sync_seconds)
            stop.set()
            for t in threads:
                t.join()
            dt = time.perf_counter() - t0
            rounds = getattr(store.flusher, "rounds", 0) - rounds0
    finally:
        stop.set()
        store.shutdown()
        shutil.rmtree(d, ignore_errors=True)
    all_lat = [x for l in lats for x in l]
    n = sum(counts) * batch
    ctx.last_per_round = n / rounds if rounds else float("nan")
    return n / dt, percentile(all_lat, 50) * 1e3, percentile(all_lat, 99) * 1e3, n, sum(fails)


def _lat_4k(ctx: Context, d: str, mode: str, n: int, offset_blocks: int) -> list[float]:
    """Latency of 4 KiB appends made durable one at a time on a preallocated file."""
    block = os.urandom(4096)
    path = os.path.join(d, f"lat-{mode}-{offset_blocks}")
    fd, mm = preallocated_mmap(path, n * 4096)
    perf = time.perf_counter
    out = []
    try:
        if mode == "mmap":
            for i in range(n):
                off = i * 4096
                t = perf()
                mm[off:off + 4096] = block
                mm.flush(off, 4096)
                out.append(perf() - t)
        else:
            for i in range(n):
                t = perf()
                os.pwrite(fd, block, i * 4096)
                os.fdatasync(fd)
                out.append(perf() - t)
    finally:
        mm.close()
        os.close(fd)
        os.unlink(path)
    return out


def bench_sync(ctx: Context) -> None:
    print(f"[sync] SYNC_FLUSH, {SYNC_THREADS} producer threads doing put_message", flush=True)
    # Raw costs first, interleaved in rounds so both modes see the same disk weather.
    d = ctx.tmpdir("lat")
    mm_lat: list[float] = []
    pw_lat: list[float] = []
    rounds = 4
    try:
        for r in range(rounds):
            mm_lat += _lat_4k(ctx, d, "mmap", ctx.sizes.lat_samples // rounds, r)
            pw_lat += _lat_4k(ctx, d, "pwrite", ctx.sizes.lat_samples // rounds, r)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    for key, name, lat in (("lat4k_mmap", "4 KiB mmap write + msync", mm_lat),
                           ("lat4k_pwrite", "4 KiB pwrite + fdatasync", pw_lat)):
        ctx.add(f"{key}_p50", f"raw {name}, p50", percentile(lat, 50) * 1e6, "us", higher_is_better=False)
        ctx.add(f"{key}_p99", f"raw {name}, p99", percentile(lat, 99) * 1e6, "us", higher_is_better=False)
    ctx.add("lat4k_ratio", "  ratio p50 mmap+msync / pwrite+fdatasync",
            percentile(mm_lat, 50) / percentile(pw_lat, 50), "x", higher_is_better=False)
    # A fresh file flatters the mapping: past a few dozen MiB the kernel's large folios make a
    # small msync write back a whole folio (why a SYNC_FLUSH commitlog is advised random).
    for key, r in zip(("default", "random", "pwrite"), small_msync.run(ctx.tmpdir("small"))):
        ctx.add(f"small_flush_{key}", f"1.2 KB append + flush after 64 MiB, {r.mode}, p50",
                r.after_us, "us", higher_is_better=False,
                note=f"{r.fresh_us:.0f} us near the start of the file")
    best = min(percentile(mm_lat, 50), percentile(pw_lat, 50))
    ctx.add("sync8_bound", f"  bound: {SYNC_THREADS} threads x 1 msg in flight / p50 flush",
            SYNC_THREADS / best, "msg/s",
            note="each producer waits for its own flush, so at most one message per thread per "
                 "flush round; 8 threads cannot beat this whatever the store does")

    for key, label, changes in (
            ("sync8_mmap", "SYNC_FLUSH 8 threads, mmap write + msync (default)", {}),
            ("sync8_pwrite", "SYNC_FLUSH 8 threads, write_without_mmap (pwrite + fdatasync)",
             {"write_without_mmap": True})):
        rate, p50, p99, n, fails = _sync_run(ctx, label, **changes)
        note = (f"{n:,} msgs; put latency p50 {p50:.2f} ms p99 {p99:.2f} ms; "
                f"{ctx.last_per_round:.1f} msgs per flush; timed after {SYNC_PREFILL_MIB} MiB "
                f"written")
        if fails:
            note += f"; {fails} not PUT_OK"
        ctx.add(key, label, rate, "msg/s", target=40_000, note=note)
    floor = group_commit_floor.run(ctx.tmpdir("floor"), SYNC_THREADS, ctx.sizes.sync_seconds)
    ctx.add("sync8_floor", f"  floor: {SYNC_THREADS} threads, a minimal Python group commit",
            floor.rate, "msg/s",
            note=f"tests/perf/group_commit_floor.py: a copy into an mmap and a leader's msync, "
                 f"none of the store's work; {floor.per_round:.1f} msgs per flush")
    a, b = ctx.results["sync8_mmap"].value, ctx.results["sync8_pwrite"].value
    ctx.add("sync8_ratio", "  ratio pwrite / mmap (SYNC_FLUSH)", b / a if a else float("nan"), "x")
    rate, p50, p99, n, fails = _sync_run(ctx, f"SYNC_FLUSH 8 threads x put_messages({BATCH})",
                                         batch=BATCH)
    ctx.add("sync8_batch32", f"SYNC_FLUSH 8 threads x put_messages({BATCH}), mmap (what the "
            "messaging layer sends)", rate, "msg/s",
            note=f"{n:,} msgs; call latency p50 {p50:.2f} ms p99 {p99:.2f} ms; "
                 f"{ctx.last_per_round:.1f} msgs per flush" + (f"; {fails} not PUT_OK" if fails else ""))
    rate, p50, p99, n, fails = _sync_run(ctx, "SYNC_FLUSH 8 threads, no-op msync (diag)",
                                         io=NoSyncFileIO())
    ctx.add("sync8_nosync", "  diag: same machinery, msync/fdatasync made no-ops", rate, "msg/s",
            note=f"put latency p50 {p50:.2f} ms p99 {p99:.2f} ms: the cost of the put + "
                 "group-commit + thread wake-ups alone")


# -- 5. reput ------------------------------------------------------------------------------------
def bench_reput(ctx: Context) -> None:
    """Reput over a filled store: the records decoded from the bytes with the index in this
    process (as before dispatch hints and the index process: the baseline; a slave still
    decodes), then taken from the hints the puts left (a master), with the index in this
    process, in a child process (messageIndexProcessEnable, what a node runs) and off. The
    rate, and the CPU per message of the store's process and of the index process: the
    store process's figure is what the serving process pays under its GIL for dispatch."""
    n = ctx.sizes.reput_messages  # below HINTS_MAX: every record of a hinted run has its hint
    print(f"[reput] catch_up() from 0 over {n:,} messages (store loaded, reput not running)", flush=True)
    variants = (("reput_decoded", "decoded, index in this process", False, {}),
                ("reput_index", "hinted, index in this process", True, {}),
                ("reput_index_process", "hinted, index in a child process", True,
                 {"message_index_process_enable": True}),
                ("reput_noindex", "hinted, index disabled", True, {"message_index_enable": False}))
    for key, what, hinted, changes in variants:
        d = ctx.tmpdir("reput")
        store = open_store(d, start=False, **changes)
        try:
            fill(ctx, store, n)
            if not hinted:
                store.reput.hints.clear()
            hints = len(store.reput.hints)
            store.reput.reput_from_offset = 0
            size = store.max_phy_offset()
            label = f"reput catch_up, {what}"
            pids = {"store": os.getpid()}
            child = getattr(store.index_service, "pid", None)
            if child is not None:
                pids["index process"] = child
            with ctx.measure(label), CpuWindow(pids) as cpu:
                got = store.reput.catch_up()
        finally:
            store.shutdown()
            shutil.rmtree(d, ignore_errors=True)
        if got != n:
            raise RuntimeError(f"reput dispatched {got} of {n}")
        dt = cpu.wall
        ctx.add(key, label, got / dt, "msg/s", target=200_000,
                note=f"{got:,} msgs ({hints:,} hinted), {size / 1e6 / dt:,.0f} MB/s of commitlog")
        for name, us in cpu.per_message(got).items():
            ctx.add(f"{key}_cpu_{name.split()[0]}", f"  CPU per message, {name}", us, "us",
                    higher_is_better=False)


# -- 6. recovery scan and restart ----------------------------------------------------------------
def bench_recovery(ctx: Context) -> None:
    sz = ctx.sizes
    file_size = sz.store_file_mib * MiB
    target_bytes = sz.store_mib * MiB
    rec = record_size()
    n = int(target_bytes * 0.99) // rec
    if file_size >= target_bytes:  # one file: stay inside it
        n = (file_size - 2 * BATCH * rec) // rec
    print(f"[recovery] {sz.store_mib} MiB store in {sz.store_file_mib} MiB commitlog files "
          f"({n:,} msgs, batch puts)", flush=True)
    d = ctx.tmpdir("restart")
    changes = {"mapped_file_size_commit_log": file_size}
    try:
        store = open_store(d, **changes)
        try:
            t0 = time.perf_counter()
            fill(ctx, store, n)
            fill_dt = time.perf_counter() - t0
            caught = wait_reput(store, 600)
            end = store.max_phy_offset()
            files = len(store.commitlog.queue)
        finally:
            store.shutdown()
        print(f"  filled {end / MiB:,.0f} MiB in {fill_dt:.1f}s ({n / fill_dt:,.0f} msg/s with "
              f"reput running){'' if caught else '; reput had not caught up'}", flush=True)
        cfg = StoreConfig(store_path_root_dir=d, **changes)

        # Recovery scan with and without CRC over every commitlog file (page cache warm).
        def scan(check_crc: bool, label: str) -> tuple[float, int, int]:
            q = MappedFileQueue(cfg.commit_log_dir, file_size, DEFAULT_FILE_IO)
            q.load()
            try:
                files_ = q.snapshot()
                with ctx.measure(label):
                    t = time.perf_counter()
                    got_end, count = recovery.scan_valid_end(files_, 0, check_crc)
                    dt = time.perf_counter() - t
            finally:
                q.close()
            if got_end != end:
                raise RuntimeError(f"scan ended at {got_end}, expected {end}")
            return got_end / 1e6 / dt, count, got_end

        mbps, count, _ = max(scan(True, "recovery.scan_valid_end, CRC"),
                             scan(True, "recovery.scan_valid_end, CRC (2nd)"))
        ctx.add("scan_crc", "recovery scan_valid_end with CRC (warm cache)", mbps, "MB/s",
                target=300, note=f"{end / MiB:,.0f} MiB, {count:,} records, {files} files; best of 2")
        mbps, _, _ = max(scan(False, "recovery.scan_valid_end, no CRC"),
                         scan(False, "recovery.scan_valid_end, no CRC (2nd)"))
        ctx.add("scan_nocrc", "  diag: scan_valid_end without CRC (warm cache)", mbps, "MB/s")
        evict_from_page_cache(d)
        mbps, _, _ = scan(True, "recovery.scan_valid_end, CRC, cold")
        ctx.add("scan_crc_cold", "  diag: scan_valid_end with CRC (cold cache)", mbps, "MB/s")

        def restart(label: str, abnormal: bool) -> tuple[float, recovery.RecoveryReport]:
            abort = os.path.join(d, ABORT_FILE)
            if abnormal:
                with open(abort, "w"):
                    pass
            s = MessageStore(cfg)
            try:
                with ctx.measure(label):
                    t = time.perf_counter()
                    report = s.load()
                    dt = time.perf_counter() - t
            finally:
                s.shutdown()  # loaded, never started: flushes, keeps `abort` as it was
                if os.path.exists(abort):
                    os.unlink(abort)
            if report.abnormal != abnormal or report.end_offset != end:
                raise RuntimeError(f"unexpected recovery: {report}")
            return dt, report

        def describe(rep: recovery.RecoveryReport) -> str:
            return (f"scanned {(rep.end_offset - rep.start_offset) / MiB:,.0f} MiB, "
                    f"{rep.records:,} records; re-dispatched {(rep.end_offset - rep.reput_from) / MiB:,.0f} MiB")

        dt, rep = restart("restart load(), normal", False)
        ctx.add("restart_normal", f"restart {sz.store_mib} MiB store, clean shutdown: load()", dt, "s",
                target=5.0, higher_is_better=False, note=describe(rep))
        evict_from_page_cache(d)
        dt, rep = restart("restart load(), normal, cold", False)
        ctx.add("restart_normal_cold", "  diag: same, cold page cache", dt, "s",
                higher_is_better=False, note=describe(rep))
        dt, rep = restart("restart load(), abnormal", True)
        ctx.add("restart_abnormal", f"restart {sz.store_mib} MiB store, `abort` left: load()", dt, "s",
                higher_is_better=False, note=describe(rep))
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- output --------------------------------------------------------------------------------------
def print_table(results: dict[str, Result]) -> None:
    rows = [("benchmark", "value", "unit", "target", "status")]
    for r in results.values():
        target = "-" if r.target is None else ("≥ " if r.higher_is_better else "< ") + fmt_value(r.target, r.unit)
        rows.append((r.label, fmt_value(r.value, r.unit), r.unit, target, r.status))
    print()
    print("\n".join(format_table(rows[0], rows[1:], right={1, 3}, rule=True)))
    notes = [r for r in results.values() if r.note]
    if notes:
        print("\nnotes:")
        for r in notes:
            print(f"  {r.key}: {r.note}")


def print_profiles(ctx: Context) -> None:
    for label, fg, bg in ctx.profiles:
        print(f"\n=== profile: {label} (calling/producer threads) ===")
        if fg is not None:
            fg.sort_stats("tottime").print_stats(ctx.profile_top)
        for name, s in sorted(bg.items()):
            print(f"--- background thread {name!r} during {label} ---")
            s.sort_stats("tottime").print_stats(max(8, ctx.profile_top // 2))


def to_json(ctx: Context, args: argparse.Namespace, elapsed: float) -> dict:
    return {
        "meta": {
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "quick": args.quick,
            "only": args.only,
            "profiled": args.profile,
            "switch_interval": sys.getswitchinterval(),
            "seconds": round(elapsed, 1),
            "sizes": asdict(ctx.sizes),
        },
        "results": {k: {**asdict(r), "status": r.status} for k, r in ctx.results.items()},
    }


def print_compare(old: dict, new: dict, old_name: str, new_name: str) -> None:
    """Side by side: old, new, new/old and whether that is better (direction per figure)."""
    o, n = old.get("results", {}), new.get("results", {})
    keys = list(n) + [k for k in o if k not in n]
    rows = [("benchmark", "unit", "old", "new", "new/old", "", "status old→new")]
    for k in keys:
        ro, rn = o.get(k), n.get(k)
        r = rn or ro
        vo = ro["value"] if ro else None
        vn = rn["value"] if rn else None
        ratio = verdict = ""
        if vo and vn is not None and not (isinstance(vo, float) and math.isnan(vo)):
            q = vn / vo
            ratio = f"{q:.3f}"
            better = q > 1 if r.get("higher_is_better", True) else q < 1
            verdict = "" if abs(q - 1) < 0.05 else ("better" if better else "WORSE")
        rows.append((r["label"], r["unit"], fmt_value(vo, r["unit"]), fmt_value(vn, r["unit"]), ratio,
                     verdict, f"{ro['status'] if ro else '-'} → {rn['status'] if rn else '-'}"))
    print(f"\ncompare: old = {old_name} ({old.get('meta', {}).get('when', '?')}), "
          f"new = {new_name} ({new.get('meta', {}).get('when', '?')})")
    for side, meta in (("old", old.get("meta", {})), ("new", new.get("meta", {}))):
        if meta.get("quick") or meta.get("profiled"):
            print(f"  note: {side} run was {'--quick ' if meta.get('quick') else ''}"
                  f"{'--profile (figures inflated by the profiler)' if meta.get('profiled') else ''}")
    print("\n".join(format_table(rows[0], rows[1:], right={2, 3, 4}, rule=True)))
    print("(differences under 5% are left unmarked; on this noisy machine trust the ratio rows "
          "(x) more than absolute rates, and repeat a run before believing a change under ~15%)")


def save_and_compare(data: dict, json_path: str | None, old: dict | None, old_name: str) -> None:
    """Write a run's figures to `json_path` (when given) and print them next to `old`'s."""
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        print(f"wrote {json_path}")
    if old is not None:
        print_compare(old, data, old_name, "this run")


def load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# -- main ----------------------------------------------------------------------------------------
RUNNERS: dict[str, Callable[[Context], None]] = {
    "raw": bench_raw, "put": bench_put, "batch": bench_batch, "sync": bench_sync,
    "reput": bench_reput, "recovery": bench_recovery,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_store", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes for a fast smoke run (~1 min)")
    p.add_argument("--only", default=",".join(BENCHMARKS),
                   help=f"comma-separated subset of {','.join(BENCHMARKS)} (default: all); "
                        "put and batch also run raw, for their ratios")
    p.add_argument("--json", metavar="OUT", help="write the figures to this JSON file")
    p.add_argument("--compare", metavar="OLD", help="print OLD.json side by side with this run "
                   "(or with --against NEW.json, without running anything)")
    p.add_argument("--against", metavar="NEW", help="with --compare: the newer JSON to compare")
    p.add_argument("--profile", action="store_true",
                   help="cProfile each timed section (callers, producer threads and the store's "
                        "service threads) and print the top entries; figures are then inflated")
    p.add_argument("--profile-top", type=int, default=20, metavar="N", help="entries per profile")
    p.add_argument("--switch-interval", type=float, default=None, metavar="SECONDS",
                   help="sys.setswitchinterval for the whole run (CPython default 0.005), to "
                        "measure the GIL hand-off effect on the threaded benchmarks")
    p.add_argument("--tmpdir", default=None,
                   help="parent of the temporary stores (default: tests/perf in the repository, "
                        "so they are on the repository's disk)")
    args = p.parse_args(argv)

    if args.compare and args.against:
        print_compare(load_json(args.compare), load_json(args.against), args.compare, args.against)
        return 0
    old = load_json(args.compare) if args.compare else None  # fail early on a bad path

    selected = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in selected if s not in RUNNERS]
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS)}")
    if ("put" in selected or "batch" in selected) and "raw" not in selected:
        selected.insert(0, "raw")
    selected = [b for b in BENCHMARKS if b in selected]

    parent = args.tmpdir or os.path.join(REPO_ROOT, "tests", "perf")
    if os.stat(parent).st_dev != os.stat(REPO_ROOT).st_dev:
        print(f"warning: {parent} is not on the repository's file system", file=sys.stderr)
    root = tempfile.mkdtemp(prefix=".bench-", dir=parent)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.profile:
        _install_service_profiler()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    ctx = Context(QUICK if args.quick else FULL, root, args.profile, args.profile_top)
    print(f"bench_store: {'quick' if args.quick else 'full'} run of {', '.join(selected)}; "
          f"stores under {root}; Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"record {record_size()} B (1 KiB body); switch interval {sys.getswitchinterval()}s",
          flush=True)
    t0 = time.perf_counter()
    try:
        for name in selected:
            RUNNERS[name](ctx)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    print_table(ctx.results)
    print(f"\n({elapsed:.0f}s{'; profiled: figures inflated by cProfile' if args.profile else ''})")
    if args.profile:
        print_profiles(ctx)
    save_and_compare(to_json(ctx, args, elapsed), args.json, old, args.compare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
