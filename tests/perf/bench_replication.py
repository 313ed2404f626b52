"""Replication benchmarks: slave catch-up over gRPC by chunk size, and the sync-replicated put
rate with 8 producer threads next to the same without replication, in one run.

    python -m tests.perf.bench_replication [--quick] [--json out.json] [--compare old.json]
           [--chunks 32,128,256,512,1024]

- catch-up: a master node process serves a pre-filled store; an empty slave node process
  copies it; the time from the moment the slave serves (its replication client is running)
  until its max offset equals the master's gives MB/s (CRC-32C on both sides, the slave appending to its mmap'd files and running reput).
  The ceiling measured in the same run: the same Chunk messages over a bare gRPC stream
  between two processes, without store, CRC or disk.
- put rate: a master node in this process (so the producers call its write path directly, as
  the messaging service will), 8 threads putting single 1 KiB messages: SYNC_MASTER with one
  slave process, then ASYNC_MASTER without slaves, same store settings.
- sync put latency: the same master in this process as a SYNC_MASTER with two slave processes
  (three replicas, both slaves must ack), one thread putting single 1 KiB messages one after
  the other: p50 and p99 of put_messages (append + both acks). Target p99 < 5 ms.

Figures move with the machine's load: compare the ratios measured side by side.
"""
from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

from cluster.client.admin_client import AdminClient
from cluster.assembly.node import Node
from cluster.config.node_config import NodeConfig
from common import crc
from proto import replication_pb2 as rpb
from proto import replication_pb2_grpc as rpb_grpc
from slave.replication_client import GRPC_OPTIONS
from store.config import StoreConfig
from store.message_store import MessageStore
from store.put_result import PutStatus

from .bench_store import (FULL, QUICK, REPO_ROOT, Context, load_json, make_message, print_table,
                          save_and_compare, to_json)

MiB = 1 << 20
TOKEN = "bench-token"
SECRET = "bench-cluster-secret-0123"  # every node's clusterSecret: only members replicate
THREADS = 8


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- node processes ------------------------------------------------------------------------------
def start_node(root: str, name: str, props: dict[str, str],
               env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    props = {"brokerIP1": "127.0.0.1", "listenPort": str(port), "adminToken": TOKEN,
             "clusterSecret": SECRET, "storePathRootDir": os.path.join(root, name), **props}
    conf = os.path.join(root, f"{name}.conf")
    with open(conf, "w", encoding="utf-8") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))
    log = open(os.path.join(root, f"{name}.log"), "ab")
    proc = subprocess.Popen([sys.executable, "-m", "cluster", "node", "--config", conf],
                            stdout=subprocess.PIPE, stderr=log, cwd=REPO_ROOT,
                            env={**os.environ, "PYTHONPATH": REPO_ROOT, **(env or {})})
    line = proc.stdout.readline() if proc.stdout else b""
    if not line:
        raise RuntimeError(f"{name} did not start: see {root}/{name}.log")
    return proc, json.loads(line)["address"]


def stop_node(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fill_store(directory: str, mib: int) -> int:
    store = MessageStore(StoreConfig(store_path_root_dir=directory))
    store.start()
    try:
        i = 0
        while store.max_phy_offset() < mib * MiB:
            batch = [make_message(i + k) for k in range(64)]
            i += 64
            assert store.put_messages(batch).status is PutStatus.PUT_OK
        return store.max_phy_offset()
    finally:
        store.shutdown()


# -- catch-up ------------------------------------------------------------------------------------
def catchup_rate(root: str, total: int, kib: int, env: dict[str, str] | None = None) -> float:
    """MB/s of an empty slave catching up on the master's `total` bytes in `kib` KiB chunks;
    `env`: more environment for both processes (RMQSTORE_CRC32C)."""
    master, address = start_node(root, "master", {"brokerRole": "ASYNC_MASTER",
                                                  "haTransferBatchSize": str(kib * 1024)}, env)
    slave = None
    try:
        slave, slave_address = start_node(root, f"slave-{kib}", {
            "brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": address}, env)
        with AdminClient(slave_address, TOKEN) as client:
            # the clock starts once the slave process serves (its replication client runs)
            t0, start_offset = time.perf_counter(), client.status().max_offset
            while client.status().max_offset < total:
                time.sleep(0.02)
        dt = time.perf_counter() - t0
    finally:
        if slave is not None:
            slave.kill()
            slave.wait()
        stop_node(master)
        shutil.rmtree(os.path.join(root, f"slave-{kib}"), ignore_errors=True)
    return (total - start_offset) / MiB / dt


def bench_catchup(ctx: Context, chunks_kib: list[int], mib: int) -> None:
    root = ctx.tmpdir("repl")
    master_dir = os.path.join(root, "master")
    total = fill_store(master_dir, mib)
    print(f"catch-up of {total / MiB:.0f} MiB (1 GiB files, 1 KiB messages) by chunk size:", flush=True)
    best = (0.0, 0)
    for kib in chunks_kib:
        rate = catchup_rate(root, total, kib)
        ctx.add(f"catchup_{kib}k", f"catch-up, {kib} KiB chunks", rate, "MB/s", 300)
        best = max(best, (rate, kib))
    # the same best chunk size with crcmod's CRC-32C on both sides: the fallback as baseline
    fallback = catchup_rate(root, total, best[1], {"RMQSTORE_CRC32C": "crcmod"})
    ctx.add("catchup_crcmod", f"catch-up, {best[1]} KiB chunks, crcmod CRC-32C (fallback)",
            fallback, "MB/s")
    ctx.add("catchup_crc_ratio", f"catch-up with {crc.IMPLEMENTATION} / with crcmod",
            best[0] / fallback, "x")
    ceiling = bare_stream_rate(total, best[1] * 1024)
    ctx.add("catchup_ceiling", f"bare gRPC stream of Chunk messages, {best[1]} KiB", ceiling, "MB/s")
    ctx.add("catchup_ratio", "best catch-up / bare stream", best[0] / ceiling, "x")
    shutil.rmtree(root, ignore_errors=True)


class _BlobServicer(rpb_grpc.ReplicationServicer):
    def __init__(self, total: int, chunk: int) -> None:
        self.blob = os.urandom(chunk)
        self.total = total

    def Stream(self, request_iterator, context):  # noqa: N802
        next(request_iterator)
        sent = 0
        while sent < self.total:
            yield rpb.MasterMessage(chunk=rpb.Chunk(offset=sent, data=self.blob))
            sent += len(self.blob)


def _serve_blob(port: int, total: int, chunk: int, ready) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(4), options=GRPC_OPTIONS)
    rpb_grpc.add_ReplicationServicer_to_server(_BlobServicer(total, chunk), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    ready.set()
    server.wait_for_termination(600)


def bare_stream_rate(total: int, chunk: int) -> float:
    mp = multiprocessing.get_context("spawn")
    port = free_port()
    ready = mp.Event()
    proc = mp.Process(target=_serve_blob, args=(port, total, chunk, ready), daemon=True)
    proc.start()
    try:
        ready.wait(30)
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=GRPC_OPTIONS) as channel:
            stub = rpb_grpc.ReplicationStub(channel)
            t0 = time.perf_counter()
            got = 0
            for msg in stub.Stream(iter([rpb.SlaveMessage(hello=rpb.Hello())])):
                got += len(msg.chunk.data)
            dt = time.perf_counter() - t0
        return got / MiB / dt
    finally:
        proc.terminate()
        proc.join(10)


# -- put rate ------------------------------------------------------------------------------------
def put_rate(ctx: Context, root: str, role: str, with_slave: bool, seconds: float,
             batch: int = 1) -> float:
    port = free_port()
    store_cfg = StoreConfig(store_path_root_dir=os.path.join(root, f"m-{role}-{with_slave}-{batch}"),
                            broker_role=role, listen_port=port, broker_ip1="127.0.0.1")
    ctx.pool  # noqa: B018 - build the message pool before anything is timed
    node = Node(NodeConfig(admin_token=TOKEN, cluster_secret=SECRET, store=store_cfg))
    node.start()
    slave = None
    try:
        if with_slave:
            slave, _ = start_node(root, f"s-{role}-{batch}", {"brokerRole": "SLAVE", "brokerId": "1",
                                                       "haMasterAddress": node.address})
            deadline = time.monotonic() + 30
            while not node.role.master.tracker.in_sync_ids():
                if time.monotonic() > deadline:
                    raise RuntimeError("slave did not join the in-sync set")
                time.sleep(0.05)
        counts = [0] * THREADS
        failures = [0] * THREADS
        stop = threading.Event()

        def producer(t: int) -> None:
            pool = ctx.pool  # built before the clock starts: measure the node, not the producer
            mask = len(pool) - 1
            i = t * batch
            while not stop.is_set():
                r = node.put_messages([pool[(i + k) & mask] for k in range(batch)])
                i += THREADS * batch
                if r.status is PutStatus.PUT_OK:
                    counts[t] += batch
                else:
                    failures[t] += 1

        threads = [threading.Thread(target=producer, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        time.sleep(0.3)  # warm-up
        start_count, t0 = sum(counts), time.perf_counter()
        time.sleep(seconds)
        done, dt = sum(counts) - start_count, time.perf_counter() - t0
        stop.set()
        for th in threads:
            th.join()
        if sum(failures):
            print(f"  ({sum(failures)} puts not PUT_OK)")
        return done / dt
    finally:
        if slave is not None:
            stop_node(slave)
        node.stop()


def sync_put_latencies(ctx: Context, root: str, slaves: int, samples: int) -> list[float]:
    """ms of sequential single puts on a SYNC_MASTER in this process with `slaves` slave
    processes, every one of them required to ack (inSyncReplicas = slaves + 1)."""
    store_cfg = StoreConfig(store_path_root_dir=os.path.join(root, f"lat-m{slaves}"),
                            broker_role="SYNC_MASTER", listen_port=free_port(),
                            broker_ip1="127.0.0.1", in_sync_replicas=slaves + 1,
                            min_in_sync_replicas=slaves + 1)
    pool = ctx.pool
    node = Node(NodeConfig(admin_token=TOKEN, cluster_secret=SECRET, store=store_cfg))
    node.start()
    procs: list[subprocess.Popen] = []
    try:
        for k in range(slaves):
            proc, _ = start_node(root, f"lat-s{slaves}-{k}", {
                "brokerRole": "SLAVE", "brokerId": str(k + 1), "haMasterAddress": node.address})
            procs.append(proc)
        deadline = time.monotonic() + 30
        while len(node.role.master.tracker.in_sync_ids()) < slaves:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{slaves} slaves did not join the in-sync set")
            time.sleep(0.05)
        out: list[float] = []
        for i in range(samples + 200):  # the first 200: warm-up
            t0 = time.perf_counter()
            r = node.put_messages([pool[i & (len(pool) - 1)]])
            dt = (time.perf_counter() - t0) * 1000
            if r.status is not PutStatus.PUT_OK:
                raise RuntimeError(f"put {i}: {r.status} {r.reason}")
            if i >= 200:
                out.append(dt)
        return out
    finally:
        for proc in procs:
            stop_node(proc)
        node.stop()


def bench_latency(ctx: Context, samples: int) -> None:
    root = ctx.tmpdir("latency")
    print(f"sync put latency, {samples} sequential single 1 KiB puts, master in this process:",
          flush=True)
    lat = sorted(sync_put_latencies(ctx, root, 2, samples))
    pick = lambda q: lat[min(len(lat) - 1, int(q / 100 * len(lat)))]  # noqa: E731
    ctx.add("sync2_put_p50", "SYNC_MASTER + 2 slaves, single put p50", pick(50), "ms")
    ctx.add("sync2_put_p99", "SYNC_MASTER + 2 slaves, single put p99", pick(99), "ms", 5.0,
            higher_is_better=False)
    shutil.rmtree(root, ignore_errors=True)


def bench_put(ctx: Context, seconds: float) -> None:
    root = ctx.tmpdir("put")
    print(f"put rate, {THREADS} threads, 1 KiB messages, master in this process:", flush=True)
    for batch in (1, 32):
        what = "single puts" if batch == 1 else f"batches of {batch}"
        sync = put_rate(ctx, root, "SYNC_MASTER", True, seconds, batch)
        ctx.add(f"put_sync_repl_b{batch}", f"SYNC_MASTER + 1 slave, {what}", sync, "msg/s")
        plain = put_rate(ctx, root, "ASYNC_MASTER", False, seconds, batch)
        ctx.add(f"put_no_repl_b{batch}", f"ASYNC_MASTER, no slave, {what}", plain, "msg/s")
        ctx.add(f"put_ratio_b{batch}", f"sync-replicated / unreplicated, {what}", sync / plain, "x")
    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.perf.bench_replication",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="64 MiB catch-up, 2 chunk sizes, 2 s puts")
    p.add_argument("--chunks", default="32,128,256,512,1024", help="chunk sizes in KiB")
    p.add_argument("--mib", type=int, default=None, help="catch-up size (default 512, quick 64)")
    p.add_argument("--only", default="catchup,put,latency")
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--compare", metavar="OLD")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    old = load_json(args.compare) if args.compare else None
    root = tempfile.mkdtemp(prefix=".bench-repl-", dir=os.path.join(REPO_ROOT, "tests", "perf"))
    ctx = Context(QUICK if args.quick else FULL, root, False, 0)
    chunks = [int(c) for c in args.chunks.split(",")]
    if args.quick:
        chunks = [chunks[0], chunks[-1]]
    t0 = time.perf_counter()
    try:
        if "catchup" in args.only:
            bench_catchup(ctx, chunks, args.mib or (64 if args.quick else 512))
        if "put" in args.only.split(","):
            bench_put(ctx, 2.0 if args.quick else 5.0)
        if "latency" in args.only:
            bench_latency(ctx, 1000 if args.quick else 3000)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(ctx.results)
    args.profile = False
    args.switch_interval = None
    save_and_compare(to_json(ctx, args, time.perf_counter() - t0), args.json, old, args.compare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
