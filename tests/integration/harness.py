"""Real node processes on 127.0.0.1 for integration tests: started with `python -m cluster
node`, observed through the Admin API, killed, paused and resumed by pid, always reaped."""
from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from cluster.client.admin_client import AdminClient
from cluster.client.controller_client import ControllerClient
from cluster.assembly.local_cluster import free_base_port
from proto import admin_pb2 as pb
from store.layout import COMMITLOG_DIR, CONSUME_QUEUE_DIR, LOCK_FILE
# messages (support/admin.py), FAST_HA, free_port and wait_until (support/waiting.py) are
# named here too: the integration and audit suites import them with the rest of the harness.
from tests.support.admin import messages  # noqa: F401
from tests.support.waiting import FAST_HA, free_port, wait_until  # noqa: F401

if TYPE_CHECKING:
    from store.message_store import MessageStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "integration-test-token"
CLUSTER_SECRET = "integration-test-cluster-secret"


class NodeProcess:
    """One node (or, with kind="controller", a controller). `props` are broker.conf keys; the
    store lives in <root>/<name>."""
    kind = "node"

    def __init__(self, root: str, name: str, props: dict[str, str], env: dict[str, str] | None = None) -> None:
        self.root = root
        self.name = name
        self.port = free_port()
        self.store_dir = os.path.join(root, name)
        self.props = {**self.default_props(), **props}
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(root, f"{name}.log")
        self._client: AdminClient | None = None
        self.ready: dict | None = None
        self.starts = 0

    def default_props(self) -> dict[str, str]:
        return {"brokerIP1": "127.0.0.1", "listenPort": str(self.port),
                "storePathRootDir": self.store_dir, "adminToken": TOKEN,
                "clusterSecret": CLUSTER_SECRET, "mappedFileSizeCommitLog": str(1024 * 1024)}

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0, wait_ready: bool = True, **extra: str) -> "NodeProcess":
        """Write the config, launch the process and (unless wait_ready is false) wait for its
        JSON "ready" line. The ready line is kept in `self.ready`."""
        self.props.update(extra)
        conf = os.path.join(self.root, f"{self.name}.conf")
        with open(conf, "w", encoding="utf-8") as f:
            f.write("".join(f"{k}={v}\n" for k, v in self.props.items()))
        env = {**os.environ, **self.env, "PYTHONPATH": ROOT}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "cluster", self.kind, "--config", conf],
                                         stdout=subprocess.PIPE, stderr=log, env=env, cwd=ROOT)
        assert self.proc.stdout is not None
        self.starts += 1
        if not wait_ready:
            return self
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline and not line:
            line = self.proc.stdout.readline()
            if self.proc.poll() is not None and not line:
                break
        if not line:
            self.kill()
            raise AssertionError(f"{self.name} did not start; log:\n{self.log_tail()}")
        ready = json.loads(line)
        assert ready["event"] == "ready", ready
        self.ready = ready
        return self

    def wait_exit(self, timeout: float = 30.0) -> int:
        """Wait for the process to end by itself; its return code (-N: killed by signal N)."""
        assert self.proc is not None
        code = self.proc.wait(timeout)
        self._drop_client()
        return code

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_text(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def admin(self) -> AdminClient:
        if self._client is None:
            self._client = AdminClient(self.address, TOKEN, timeout=15)
        return self._client

    def status(self) -> pb.NodeStatus:
        return self.admin().status()

    # -- signals, by pid ----------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL: no flush, no clean shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._drop_client()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop on SIGTERM; log:\n{self.log_tail()}")
        self._drop_client()
        return code

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _drop_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is not None and self.proc.poll() is not None and self.proc.stdout:
            self.proc.stdout.close()


class ControllerProcess(NodeProcess):
    """A controller process: fast timeouts for tests (failover after 2 s, lease 1.2 s)."""
    kind = "controller"

    def default_props(self) -> dict[str, str]:
        token_file = os.path.join(self.root, "admin.token")
        if not os.path.exists(token_file):
            with open(token_file, "w", encoding="utf-8") as f:
                f.write(TOKEN + "\n")
        return {"listenAddress": f"127.0.0.1:{self.port}", "controllerStorePath": self.store_dir,
                "adminTokenFile": token_file, "clusterSecret": CLUSTER_SECRET,
                "controllerFailoverTimeoutMillis": "2000",
                "controllerLeaseMillis": "1200", "controllerSettleMillis": "2000"}

    def client(self) -> ControllerClient:
        return ControllerClient(self.address, TOKEN, timeout=10)

    def group(self, broker_name: str = "broker-a"):
        with self.client() as c:
            for g in c.groups().groups:
                if g.broker_name == broker_name:
                    return g
        return None


# Broker keys of nodes under a test controller: heartbeat every 200 ms, slaves leave the
# sync state set after 1.5 s without catching up.
CONTROLLED = {**FAST_HA, "controllerHeartbeatInterval": "200"}


class ArchiveServerProcess(NodeProcess):
    """An archive server process (`python -m cluster archive`), its files in <root>/<name>;
    `ready` holds its ready line (address, http, archive_id, admin_token)."""
    kind = "archive"

    def default_props(self) -> dict[str, str]:
        return {"listenAddress": f"127.0.0.1:{self.port}", "archiveStorePath": self.store_dir,
                "clusterSecret": CLUSTER_SECRET, "httpListenAddress": "127.0.0.1:0",
                "cleanResourceInterval": "500",
                # tests ship stores written under a ManualClock in 2024: keep them unless a test
                # asks for expiry (whatever the hour, deleteWhen included)
                "fileReservedTime": "1000000"}

    @property
    def token(self) -> str:
        with open(os.path.join(self.store_dir, "admin.token"), encoding="utf-8") as f:
            return f.read().strip()


class Group:
    """A master and its slaves (and maybe a controller); `close()` kills whatever is still
    running (by pid)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.nodes: list[NodeProcess] = []

    def master(self, role: str = "SYNC_MASTER", name: str = "master", **props: str) -> NodeProcess:
        node = NodeProcess(self.root, name, {"brokerId": "0", "brokerRole": role, **props})
        self.nodes.append(node)
        return node.start()

    def add(self, node: NodeProcess) -> NodeProcess:
        """Track a node built by the caller, so close() reaps it."""
        self.nodes.append(node)
        return node

    def slave(self, master: NodeProcess, broker_id: int, env: dict[str, str] | None = None,
              start: bool = True, **props: str) -> NodeProcess:
        node = NodeProcess(self.root, f"slave{broker_id}", {
            "brokerId": str(broker_id), "brokerRole": "SLAVE",
            "haMasterAddress": master.address, **props}, env=env)
        self.nodes.append(node)
        return node.start() if start else node

    def controller(self, **props: str) -> ControllerProcess:
        node = ControllerProcess(self.root, "controller", props)
        self.nodes.append(node)
        return node.start()

    def controlled(self, controller: ControllerProcess, name: str, broker_id: int,
                   preferred_role: str = "SLAVE", start: bool = True,
                   **props: str) -> NodeProcess:
        """A node that takes its role from `controller`."""
        node = NodeProcess(self.root, name, {
            "brokerId": str(broker_id), "brokerRole": preferred_role,
            "controllerAddr": controller.address, **CONTROLLED, **props})
        self.nodes.append(node)
        return node.start() if start else node

    def close(self) -> None:
        for node in self.nodes:
            if node.alive():
                if node.proc is not None:
                    try:
                        os.kill(node.pid, signal.SIGCONT)  # a paused process cannot die cleanly
                    except ProcessLookupError:
                        pass
                node.kill()
            node._drop_client()

    def logs(self, n: int = 60) -> str:
        return "".join(f"----- {node.name} (pid {node.proc.pid if node.proc else '-'}, "
                       f"rc {node.returncode}) -----\n{node.log_tail(n)}" for node in self.nodes)


def in_sync(master: NodeProcess, count: int) -> Callable[[], bool]:
    return lambda: len(master.status().in_sync_set) >= count


def commitlog_bytes(store_dir: str, end: int) -> bytes:
    """The commitlog's bytes in [0, end) read straight from the files."""
    directory = os.path.join(store_dir, COMMITLOG_DIR)
    out = bytearray()
    for name in sorted(os.listdir(directory)):
        if len(out) >= end:
            break
        with open(os.path.join(directory, name), "rb") as f:
            out += f.read()
    return bytes(out[:end])


def sent_ok(client: AdminClient, batch: list[pb.Message]) -> pb.SendMessagesResponse:
    r = client.send(batch)
    assert r.status == "PUT_OK", (r.status, r.reason)
    return r


def cq_units(store_dir: str, topic: str, queue_id: int) -> bytes:
    """The written 20-byte units of a consume queue (up to the first all-zero unit)."""
    directory = os.path.join(store_dir, CONSUME_QUEUE_DIR, topic, str(queue_id))
    if not os.path.isdir(directory):
        return b""
    out = bytearray()
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        for i in range(0, len(data) - 19, 20):
            unit = data[i:i + 20]
            if unit == bytes(20):
                return bytes(out)
            out += unit
    return bytes(out)


def commitlog_files(store_dir: str) -> list[str]:
    return sorted(os.listdir(os.path.join(store_dir, COMMITLOG_DIR)))


def epoch_entries(status: pb.NodeStatus) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in status.epochs]


@contextlib.contextmanager
def opened_store(store_dir: str, copy: bool = True) -> Iterator["MessageStore"]:
    """Open a stopped node's store in this process: loaded (recovered) but not started. With
    `copy` (the default) a copy is opened, so recovery cannot change the node's own files."""
    from store.config import StoreConfig
    from store.message_store import MessageStore
    tmp = None
    path = store_dir
    if copy:
        tmp = tempfile.mkdtemp(prefix="store-copy-")
        path = os.path.join(tmp, "store")
        shutil.copytree(store_dir, path, ignore=shutil.ignore_patterns(LOCK_FILE))
    store = MessageStore(StoreConfig(store_path_root_dir=path, mapped_file_size_commit_log=1024 * 1024,
                                     listen_port=free_port()), auto_services=False)
    try:
        store.load()
        yield store
    finally:
        store.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


class Writer:
    """A background producer: sends batches of `messages(topic, batch, ...)` to `address`
    until stopped, remembering every response (batch messages, status, results)."""

    def __init__(self, address: str, topic: str, batch: int = 20, size: int = 256,
                 start: int = 0, queues: int = 4) -> None:
        self.address, self.topic, self.batch, self.size = address, topic, batch, size
        self.next = start
        self.queues = queues
        self.sent: list[tuple[list[pb.Message], pb.SendMessagesResponse]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"writer-{topic}", daemon=True)

    def start(self) -> "Writer":
        self._thread.start()
        return self

    def _run(self) -> None:
        with AdminClient(self.address, TOKEN, timeout=15) as client:
            while not self._stop.is_set():
                batch = messages(self.topic, self.batch, start=self.next, queues=self.queues,
                                 size=self.size)
                try:
                    response = client.send(batch)
                except Exception as e:  # reported by stop()
                    self.errors.append(e)
                    return
                self.sent.append((batch, response))
                self.next += self.batch

    def stop(self) -> "Writer":
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "writer thread did not stop"
        return self

    def statuses(self) -> set[str]:
        return {r.status for _, r in self.sent}


def read_queue(get: Callable[[int, int], list], queue_id: int) -> list:
    """Every message of one queue, from offset 0, via `get(queue_id, offset) -> messages`."""
    out: list = []
    while True:
        batch = get(queue_id, len(out))
        if not batch:
            return out
        out.extend(batch)


# -- `python -m cluster local` -------------------------------------------------------------------
def pid_gone(pid: int) -> bool:
    """The process has exited (gone, or a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


# The command line of this checkout; an installed one (tests/packaging) passes its own command,
# environment and working folder to cluster_cli and LocalCluster.
CLI = (sys.executable, "-m", "cluster")


def cluster_cli(*argv: str, command: Sequence[str] = CLI, env: dict[str, str] | None = None,
                cwd: str = ROOT) -> subprocess.CompletedProcess:
    """`python -m cluster <argv>` as an operator runs it (output captured, 60 s at most)."""
    return subprocess.run([*command, *argv], capture_output=True, text=True, cwd=cwd, timeout=60,
                          env=env or {**os.environ, "PYTHONPATH": ROOT})


class LocalCluster:
    """`python -m cluster local --dir <root>` in a subprocess (three nodes and a controller on
    a base port with P, P+10, P+20, P+30 free; `groups` broker groups of three nodes each,
    group k's on P+100k..), its output read line by line; kill_all() reaps it and its
    processes."""

    def __init__(self, root: str, *options: str, command: Sequence[str] = CLI,
                 env: dict[str, str] | None = None, cwd: str = ROOT, groups: int = 1) -> None:
        """`options`: more `cluster local` options (--tls)."""
        self.root = root
        self.base = free_base_port(groups)
        if groups > 1:
            options = (*options, "--groups", str(groups))
        self.proc = subprocess.Popen(
            [*command, "local", "--dir", root, "--base-port", str(self.base), *options],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env or {**os.environ, "PYTHONPATH": ROOT}, cwd=cwd, start_new_session=True,
            text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {text!r} in output:\n{''.join(self.output)}") from None
            if line is None:
                raise AssertionError(f"exited before {text!r}:\n{''.join(self.output)}")
            self.output.append(line)
            if text in line:
                return

    def info(self) -> dict:
        with open(os.path.join(self.root, "cluster.json"), encoding="utf-8") as f:
            return json.load(f)

    def node_pids(self) -> list[int]:
        """The pids of the nodes and of the controller."""
        try:
            info = self.info()
        except (OSError, ValueError):
            return []
        controller = [info["controller"]["pid"]] if "controller" in info else []
        return [n["pid"] for n in info["nodes"]] + controller

    def kill_all(self) -> None:
        """Teardown: whatever still runs dies, by pid (nodes are in their own sessions)."""
        for pid in [*self.node_pids(), self.proc.pid]:
            if not pid_gone(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
