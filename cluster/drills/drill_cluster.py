"""The cluster a drill runs against: a controller and three nodes as real processes on
127.0.0.1, each in its own cgroup when partitions are possible, each killable, pausable and
restartable by pid with the config it started with.

The configs are `python -m cluster local`'s (cluster/node/local_cluster.py), so a drill tests
what a user runs. `DrillCluster` owns the processes: `close()` stops every one it started (by
pid) and removes the cgroups; the data folder stays for inspection.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, Mapping

import grpc

from cluster.admin.admin_token import ensure_token_file, read_token_file
from cluster.client.admin_client import AdminClient
from cluster.drills.partition import CgroupSet, Member, Partition, PartitionUnavailable
from cluster.node import local_cluster
from proto import admin_pb2 as pb
from store.layout import ADMIN_TOKEN_FILE

MASTER_ROLES = ("SYNC_MASTER", "ASYNC_MASTER")


class DrillProcess:
    """One controller or node process: how to start it again, its pid while it runs."""

    def __init__(self, name: str, kind: str, config: str, log_path: str, address: str,
                 starter: Callable[..., tuple[subprocess.Popen, dict]]) -> None:
        self.name, self.kind, self.config = name, kind, config
        self.log_path, self.address = log_path, address
        self._starter = starter
        self.popen: subprocess.Popen | None = None
        self.paused = False

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} never started"
        return self.popen.pid

    def start(self, **popen) -> None:
        self.popen, _ = self._starter(self.config, self.log_path, **popen)
        self.paused = False

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, and reap it."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(30)
        self.paused = False

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (after SIGCONT if paused), SIGKILL after `timeout`."""
        if not self.alive():
            return
        self.resume()
        os.kill(self.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


class DrillCluster:
    """A controller (`controller`) and the nodes `master`, `slave1`, `slave2` under `root`.
    The names are the starting roles; the controller moves roles around during a drill, so
    `current_master()` asks the nodes."""

    def __init__(self, root: str, base_port: int, role: str = "SYNC_MASTER",
                 controller_props: Mapping[str, str] | None = None,
                 node_env: Mapping[str, Mapping[str, str]] | None = None,
                 partitions: bool = False) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.token_file = os.path.join(self.root, ADMIN_TOKEN_FILE)
        ensure_token_file(self.token_file)
        self.token = read_token_file(self.token_file)
        self.node_env = {k: dict(v) for k, v in (node_env or {}).items()}
        self.cgroups = CgroupSet(os.path.basename(self.root) + f"-{os.getpid()}") \
            if partitions else None
        self._partitions: list[Partition] = []
        ctrl_port = base_port + local_cluster.CONTROLLER_PORT_OFFSET
        ctrl_conf = local_cluster.write_controller_config(self.root, ctrl_port, self.token_file)
        if controller_props:
            with open(ctrl_conf, "a", encoding="utf-8") as f:
                f.writelines(f"{k}={v}\n" for k, v in controller_props.items())
        self.controller = DrillProcess("controller", "controller", ctrl_conf,
                                       self._log("controller"), f"127.0.0.1:{ctrl_port}",
                                       local_cluster.start_controller)
        self.nodes = [DrillProcess(name, "node", conf, self._log(name), address,
                                   local_cluster.start_node)
                      for name, conf, address in local_cluster.write_configs(
                          self.root, base_port, role, self.token_file, self.controller.address)]
        self.by_name = {p.name: p for p in (self.controller, *self.nodes)}

    def _log(self, name: str) -> str:
        return os.path.join(self.root, f"{name}.log")

    # -- processes ---------------------------------------------------------------------------
    def start(self, proc: DrillProcess) -> None:
        popen: dict = {}
        env = self.node_env.get(proc.name)
        if env:
            popen["env"] = {**os.environ, **env}
        if self.cgroups is not None:
            popen["preexec_fn"] = self.cgroups.join_hook(proc.name)
        proc.start(**popen)

    def start_all(self, timeout: float = 30.0) -> None:
        for proc in (self.controller, *self.nodes):
            self.start(proc)
        self.wait_for(lambda: self.current_master() is not None and self.in_sync_count() == 2,
                      timeout, "a master with both slaves in sync")

    def close(self) -> None:
        self.heal_partitions()
        for proc in (*self.nodes, self.controller):
            proc.stop(10)
        if self.cgroups is not None:
            self.cgroups.close()

    # -- views ---------------------------------------------------------------------------------
    def admin(self, proc: DrillProcess, timeout: float = 2.0) -> AdminClient:
        return AdminClient(proc.address, self.token, timeout=timeout)

    def status(self, proc: DrillProcess) -> pb.NodeStatus | None:
        if not proc.alive() or proc.paused:
            return None
        try:
            with self.admin(proc) as client:
                return client.status()
        except grpc.RpcError:
            return None

    def current_master(self) -> DrillProcess | None:
        """The live node that says it is master with the highest epoch."""
        best: tuple[int, DrillProcess] | None = None
        for proc in self.nodes:
            st = self.status(proc)
            if st is not None and st.role in MASTER_ROLES and (best is None or st.epoch > best[0]):
                best = (st.epoch, proc)
        return best[1] if best else None

    def in_sync_count(self) -> int:
        master = self.current_master()
        st = self.status(master) if master else None
        return len(st.in_sync_set) if st else 0

    def slaves(self) -> list[DrillProcess]:
        master = self.current_master()
        return [p for p in self.nodes if p is not master]

    @staticmethod
    def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")

    # -- partitions ----------------------------------------------------------------------------
    def partition(self, a: list[DrillProcess], b: list[DrillProcess]) -> Partition:
        """Cut a from b (both directions) until heal_partitions()."""
        if self.cgroups is None:
            raise PartitionUnavailable("this cluster was started without partitions=True")
        cg = self.cgroups
        tag = f"{os.getpid()}-{len(self._partitions)}"
        p = Partition(tag, [Member(cg.path(x.name), x.port) for x in a],
                      [Member(cg.path(y.name), y.port) for y in b])
        p.apply()
        self._partitions.append(p)
        return p

    def heal_partitions(self) -> None:
        while self._partitions:
            self._partitions.pop().heal()
