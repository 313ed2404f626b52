"""Servers of tests/perf/compare.py: our node processes (tests/integration/harness, as
bench_messaging starts them), nats-server (JetStream, R1 or a 3-server R3 cluster) and
redis-server (streams, AOF), each on 127.0.0.1 on free ports in its own temp dir, stopped by pid.

Peers come from Debian's packages: `ensure_peer_binaries` installs them with apt-get when
missing (as root; otherwise it says what to install).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from tests.integration.harness import Group, free_port, in_sync, wait_until

from tests.support.processes import index_process_pid, stop_process

from .compare_report import SystemInfo

PACKAGES = {"nats-server": "nats-server", "redis-server": "redis-server"}

SYSTEMS: dict[str, SystemInfo] = {s.key: s for s in [
    SystemInfo("ours-async", "ours, ASYNC_MASTER alone, ASYNC_FLUSH",
               "written to the page cache (the commitlog), flushed in the background",
               ours=True),
    SystemInfo("ours-syncflush", "ours, ASYNC_MASTER alone, SYNC_FLUSH",
               "fsynced (group commit) on the node before the ack", ours=True),
    SystemInfo("ours-syncmaster", "ours, SYNC_MASTER + 2 slaves, ASYNC_FLUSH",
               "in the master's page cache and acked by one slave (not fsynced)", ours=True),
    SystemInfo("nats-r1", "NATS JetStream, 1 server, file storage, R1",
               "written to the stream file, not fsynced (2.9 syncs every 2 min)",
               peer_of="ours-async"),
    SystemInfo("nats-r3", "NATS JetStream, 3-server cluster, file storage, R3",
               "stored by a quorum (2 of 3) of servers, not fsynced", peer_of="ours-syncmaster"),
    SystemInfo("redis-everysec", "Redis streams, appendonly yes, appendfsync everysec",
               "in memory and written to the AOF, fsynced once a second",
               peer_of="ours-async"),
    SystemInfo("redis-always", "Redis streams, appendonly yes, appendfsync always",
               "written to the AOF and fsynced before the reply", peer_of="ours-syncflush"),
]}


def ensure_peer_binaries() -> None:
    """Install nats-server and redis-server from Debian's packages when they are missing."""
    missing = [pkg for binary, pkg in PACKAGES.items() if not _which(binary)]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"compare: {', '.join(missing)} missing; run as root (it installs them "
                         f"with apt-get) or: sudo apt-get install -y {' '.join(missing)}")
    print(f"installing {', '.join(missing)} with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", *missing], env=env).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(["apt-get", "install", "-y", *missing], env=env, check=True)


def _which(binary: str) -> str | None:
    # Debian puts nats-server in /usr/sbin, which a non-login PATH may lack.
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin:/bin")


def version(binary: str) -> str:
    out = subprocess.run([_which(binary) or binary, "--version"], capture_output=True, text=True)
    return (out.stdout or out.stderr).strip().splitlines()[0]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s")


class Running:
    """One started system: its temp dir, its server processes (by pid, the first one is the
    one clients talk to) and the client spec of compare_clients."""

    def __init__(self, key: str, root: str) -> None:
        self.key = key
        self.root = root
        self.spec: dict = {}
        self.pids: dict[str, int] = {}  # process name -> pid
        self._procs: list[subprocess.Popen] = []
        self._group: Group | None = None

    def _spawn(self, name: str, argv: list[str], port: int) -> None:
        log = open(os.path.join(self.root, f"{name}.log"), "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                                start_new_session=True)
        log.close()
        self._procs.append(proc)
        self.pids[name] = proc.pid
        _wait_port(port, proc, name)

    def wait_dispatched(self, timeout: float = 60.0) -> None:
        """Ours: until every node's reput has dispatched its whole commitlog (consume queues
        built), so a consume run measures consuming, not dispatch; peers: nothing to wait for."""
        if self._group is None:
            return
        wait_until(lambda: all(s.dispatched_offset >= s.max_offset for s in
                               (n.status() for n in self._group.nodes if n.alive())),
                   timeout, f"{self.key} dispatched its backlog", interval=0.05)

    def stop(self) -> None:
        """Stop every process this system started, by pid, then remove its temp dir."""
        if self._group is not None:
            self._group.close()
        for proc in self._procs:
            stop_process(proc)
        shutil.rmtree(self.root, ignore_errors=True)

    def alive(self) -> bool:
        """Every server process of the system is still running."""
        if self._group is not None:
            return all(n.alive() for n in self._group.nodes)
        return all(proc.poll() is None for proc in self._procs)

    def log_tail(self, n: int = 20) -> str:
        if self._group is not None:
            return self._group.logs(n)
        out = []
        for name in self.pids:
            path = os.path.join(self.root, f"{name}.log")
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out.append(f"--- {name}\n" + "".join(f.readlines()[-n:]))
        return "\n".join(out)


def start(key: str, parent: str, file_mib: int) -> Running:
    """Start system `key` (a SYSTEMS key) in a new temp dir under `parent`."""
    run = Running(key, tempfile.mkdtemp(prefix=f"{key}-", dir=parent))
    try:
        if key.startswith("ours-"):
            _start_ours(run, key, file_mib)
        elif key.startswith("nats-"):
            _start_nats(run, 3 if key == "nats-r3" else 1)
        else:
            _start_redis(run, key.removeprefix("redis-"))
    except BaseException:
        try:
            print(run.log_tail(), file=sys.stderr)
        finally:  # stop what was started even when printing fails (a closed pipe)
            run.stop()
        raise
    return run


def _start_ours(run: Running, key: str, file_mib: int) -> None:
    props = {"mappedFileSizeCommitLog": str(file_mib << 20)}
    role, slaves = "ASYNC_MASTER", 0
    if key == "ours-syncflush":
        props["flushDiskType"] = "SYNC_FLUSH"
    if key == "ours-syncmaster":
        role, slaves = "SYNC_MASTER", 2
    group = run._group = Group(run.root)
    master = group.master(role, **props)
    run.pids["master"] = master.pid
    slave_pids = [group.slave(master, i + 1, **props).pid for i in range(slaves)]
    for i, pid in enumerate(slave_pids):
        run.pids[f"slave{i + 1}"] = pid
    # Each node's index process (store/index/index_process.py): its CPU is the node's too.
    for name, pid in (("master", master.pid),
                      *((f"slave{i + 1}", p) for i, p in enumerate(slave_pids))):
        index = index_process_pid(pid)
        if index is not None:
            run.pids[f"{name}-index"] = index
    if slaves:
        wait_until(in_sync(master, slaves), timeout=30, what=f"{slaves} slaves in sync")
    run.spec = {"kind": "ours", "address": master.address}


def _start_nats(run: Running, servers: int) -> None:
    ports = [free_port() for _ in range(servers)]
    cluster_ports = [free_port() for _ in range(servers)] if servers > 1 else []
    for i, port in enumerate(ports):
        store = os.path.join(run.root, f"js{i}")
        conf = [f"server_name: n{i}", "listen: 127.0.0.1:%d" % port,
                f'jetstream {{ store_dir: "{store}" }}']
        if cluster_ports:
            routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in cluster_ports)
            conf.append(f"cluster {{ name: bench, listen: 127.0.0.1:{cluster_ports[i]}, "
                        f"routes: [{routes}] }}")
        path = os.path.join(run.root, f"n{i}.conf")
        with open(path, "w") as f:
            f.write("\n".join(conf) + "\n")
        run._spawn(f"nats{i}", [_which("nats-server") or "nats-server", "-c", path], port)
    run.spec = {"kind": "nats", "address": f"127.0.0.1:{ports[0]}", "replicas": servers}
    if servers > 1:
        _wait_jetstream_cluster(run.spec)


def _wait_jetstream_cluster(spec: dict, timeout: float = 30) -> None:
    """A JetStream cluster takes a few seconds to elect its meta leader; until then stream
    creation fails, so try a throwaway R3 stream until it works."""
    from . import compare_clients
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            # A short timeout: a request sent before the election may never be answered.
            compare_clients.prepare({**spec, "js_timeout": 2}, "probe")
            return
        except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
            last = e
            time.sleep(0.5)
    raise RuntimeError(f"JetStream cluster not ready within {timeout} s: {last!r}")


def _start_redis(run: Running, fsync: str) -> None:
    port = free_port()
    argv = [_which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port", str(port),
            "--dir", run.root, "--appendonly", "yes", "--appendfsync", fsync, "--save", "",
            "--daemonize", "no", "--protected-mode", "no"]
    run._spawn("redis", argv, port)
    run.spec = {"kind": "redis", "address": f"127.0.0.1:{port}"}
