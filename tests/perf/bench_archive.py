"""Archive benchmark: shipping throughput and compression, and historical query latencies.

    python -m tests.perf.bench_archive [--quick] [--json out.json]

- shipping: a store in this process is filled with 1 KiB order-like messages (JSON text with
  random ids: what a topic of business events looks like) across N commitlog files; an
  ArchiveShipper ships them to an archive server process on 127.0.0.1 (its own process, as in
  production). MB/s of raw file bytes from the first FileStatus to the last ShipAck
  (checksums, zlib level 1, gRPC, the archive's decompression, checksum, fsync and reput of
  each file), and the compression ratio. Side by side in the same run, the ceilings of the
  work that bounds it: zlib level 1 alone over the same files, and CRC-32C alone.
  With --random the bodies are random bytes (incompressible: the worst case).
  "shipped and indexed" runs until the archive's reput has every record in its queues and
  index (it trails the acknowledgements).
- queries: p50 / p99 over gRPC of QueryMessages on the archive by key (the index), by offset
  message id, by UNIQ_KEY, and by a time range (first 32 messages of a topic).

Figures move with the machine's load: read them next to the ceilings of the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
import zlib

import grpc

from common.crc import crc32c
from proto import admin_pb2 as admin_pb
from proto import archive_pb2 as pb
from proto import archive_pb2_grpc as pb_grpc
from store.codec import Message
from store.config import StoreConfig
from store.message_store import MessageStore

from cluster.archive.shipper import ArchiveShipper, StoreFiles
from cluster.config.shipping_config import ShippingConfig
from cluster.security.member_gate import MemberCredentials
from tests.integration.harness import CLUSTER_SECRET, ArchiveServerProcess


def order_body(rng: random.Random, i: int, random_bytes: bool) -> bytes:
    if random_bytes:
        return rng.randbytes(1024)
    text = json.dumps({"order": i, "id": f"{rng.getrandbits(64):016x}",
                       "customer": f"c{rng.randrange(100000)}",
                       "items": [{"sku": f"SKU-{rng.randrange(5000)}", "qty": rng.randrange(9),
                                  "price": round(rng.random() * 100, 2)} for _ in range(8)],
                       "state": rng.choice(["new", "paid", "shipped"])})
    return (text + " " * 1024)[:1024].encode()


def fill(store: MessageStore, files: int, file_size: int, random_bytes: bool) -> int:
    rng = random.Random(1)
    n = 0
    while store.commitlog.max_offset() < files * file_size + 4096:
        batch = [Message(topic="Orders", body=order_body(rng, n + j, random_bytes),
                         queue_id=(n + j) % 4,
                         properties={"KEYS": f"order-{n + j}", "TAGS": "paid",
                                     "UNIQ_KEY": f"U{n + j:012d}"}) for j in range(64)]
        store.put_messages(batch)
        n += len(batch)
    return n


def read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def percentiles(samples: list[float]) -> tuple[float, float]:
    s = sorted(samples)
    return s[len(s) // 2] * 1000, s[min(len(s) - 1, int(len(s) * 0.99))] * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_archive")
    p.add_argument("--quick", action="store_true", help="4 files of 32 MiB (default 6 of 64 MiB)")
    p.add_argument("--random", action="store_true", help="incompressible random bodies")
    p.add_argument("--json", default="", help="write the figures here too")
    args = p.parse_args(argv)
    files, file_size = (4, 32 << 20) if args.quick else (6, 64 << 20)
    tmp = tempfile.mkdtemp(prefix="bench-archive-")
    archive = ArchiveServerProcess(tmp, "archive", {})
    store = MessageStore(StoreConfig(store_path_root_dir=os.path.join(tmp, "node"),
                                     mapped_file_size_commit_log=file_size))
    figures: dict[str, float] = {}
    try:
        store.load()
        store.start()
        n = fill(store, files, file_size, args.random)
        store.reput.catch_up()
        paths = [f.path for f in store.commitlog.queue.snapshot()[:files]]

        started = time.perf_counter()  # ceilings over the same bytes, in this process
        compressed = sum(len(zlib.compress(read(path), 1)) for path in paths)
        figures["zlib1_alone_mb_s"] = files * file_size / (time.perf_counter() - started) / 1e6
        started = time.perf_counter()
        for path in paths:
            crc32c(read(path))
        figures["crc32c_alone_mb_s"] = files * file_size / (time.perf_counter() - started) / 1e6

        archive.start()
        shipper = ArchiveShipper(StoreFiles(store), ShippingConfig(address=archive.address,
                                                                   ship_all=True),
                                 "bench", "bench:1", lambda: True,
                                 MemberCredentials(CLUSTER_SECRET.encode(), "bench:1"))
        started = time.perf_counter()
        while shipper.step() is not None:
            pass
        elapsed = time.perf_counter() - started
        assert shipper.stats.files == files, shipper.stats
        figures["ship_mb_s"] = files * file_size / elapsed / 1e6
        figures["compression_ratio"] = shipper.stats.ratio
        figures["zlib1_ratio"] = files * file_size / compressed

        meta = [("authorization", f"Bearer {archive.token}")]
        with grpc.insecure_channel(archive.address) as channel:  # reput trails the acks
            stub = pb_grpc.ArchiveStub(channel)
            while not all(f.indexed for g in stub.ListHoldings(pb.HoldingsRequest(),
                                                               metadata=meta).groups
                          for f in g.files):
                time.sleep(0.05)
        figures["indexed_mb_s"] = files * file_size / (time.perf_counter() - started) / 1e6
        rng = random.Random(2)
        held = n * files * file_size // store.commitlog.max_offset()  # messages in shipped files
        with grpc.insecure_channel(archive.address) as channel:
            stub = pb_grpc.ArchiveStub(channel)

            def timed(make) -> tuple[float, float]:
                samples = []
                for _ in range(200):
                    q = make()
                    t = time.perf_counter()
                    r = stub.QueryMessages(pb.ArchiveQueryRequest(query=q), metadata=meta)
                    samples.append(time.perf_counter() - t)
                    assert r.messages, q
                return percentiles(samples)

            ids = {}
            for i in (rng.randrange(held - 64) for _ in range(200)):
                r = stub.QueryMessages(pb.ArchiveQueryRequest(query=admin_pb.QueryMessagesRequest(
                    topic="Orders", key=f"order-{i}")), metadata=meta)
                ids[i] = r.messages[0].msg_id
            keys = list(ids)
            figures["query_key_p50_ms"], figures["query_key_p99_ms"] = timed(
                lambda: admin_pb.QueryMessagesRequest(topic="Orders",
                                                      key=f"order-{rng.choice(keys)}"))
            figures["query_offset_id_p50_ms"], figures["query_offset_id_p99_ms"] = timed(
                lambda: admin_pb.QueryMessagesRequest(msg_id=ids[rng.choice(keys)],
                                                      topic="Orders"))
            figures["query_uniq_key_p50_ms"], figures["query_uniq_key_p99_ms"] = timed(
                lambda: admin_pb.QueryMessagesRequest(msg_id=f"U{rng.choice(keys):012d}",
                                                      topic="Orders"))
            figures["query_time_p50_ms"], figures["query_time_p99_ms"] = timed(
                lambda: admin_pb.QueryMessagesRequest(topic="Orders", begin_timestamp_ms=1,
                                                      max_count=32, omit_body=True))
    finally:
        archive.kill()
        store.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    body = "random 1 KiB" if args.random else "1 KiB JSON orders"
    print(f"\narchive benchmark: {files} commitlog files of {file_size >> 20} MiB, {body}")
    print(f"  shipping              {figures['ship_mb_s']:8.1f} MB/s of file bytes, ratio "
          f"{figures['compression_ratio']:.1f}x")
    print(f"  shipped and indexed   {figures['indexed_mb_s']:8.1f} MB/s (reput of the "
          f"archive's consume queues and index trails the acks)")
    print(f"  ceiling: zlib-1 alone {figures['zlib1_alone_mb_s']:8.1f} MB/s (ratio "
          f"{figures['zlib1_ratio']:.1f}x), CRC-32C alone {figures['crc32c_alone_mb_s']:.0f} MB/s")
    for what in ("key", "offset_id", "uniq_key", "time"):
        print(f"  query by {what:<10} p50 {figures[f'query_{what}_p50_ms']:6.2f} ms   p99 "
              f"{figures[f'query_{what}_p99_ms']:6.2f} ms")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(figures, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
