"""The cluster a drill runs against: a controller and three nodes as real processes on
127.0.0.1, each in its own cgroup when partitions are possible, each killable, pausable and
restartable by pid with the config it started with.

The configs are `python -m cluster local`'s (cluster/assembly/local_cluster.py), so a drill tests
what a user runs (`node_props`: more keys for every node). `DrillCluster` owns the processes:
`close()` stops every one it started (by pid), lifts CPU quotas, removes delaying proxies and
the cgroups; the data folder stays for inspection.
"""
from __future__ import annotations

import os
import signal
import subprocess
from typing import Callable, Mapping

import psutil

from cluster.admin.admin_token import ensure_token_file, read_token_file
from cluster.drills.cpu_quota import CpuQuota
from cluster.drills.delay_proxy import ProxyProcess
from cluster.drills.partition import (CgroupSet, Member, Partition, PartitionUnavailable,
                                      Redirect)
from cluster.drills.target import MASTER_ROLES, GroupViews, wait_groups_whole
from cluster.assembly import local_cluster
from cluster.assembly.local_layout import group_names, layout
from store.layout import ADMIN_TOKEN_FILE

__all__ = ["DrillCluster", "DrillProcess", "MASTER_ROLES"]


class DrillProcess:
    """One controller or node process: how to start it again, its pid while it runs (a process
    this drill started, or one it found running in a `cluster local` folder)."""

    def __init__(self, name: str, kind: str, config: str, log_path: str, address: str,
                 starter: Callable[..., tuple[subprocess.Popen, dict]]) -> None:
        self.name, self.kind, self.config = name, kind, config
        self.log_path, self.address = log_path, address
        self._starter = starter
        self.popen: subprocess.Popen | None = None
        self._pid: int | None = None
        self.paused = False

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def pid(self) -> int:
        assert self._pid is not None, f"{self.name} never started"
        return self._pid

    def adopt(self, pid: int) -> None:
        """Take over a process another program started."""
        self.popen, self._pid = None, pid

    def start(self, **popen) -> None:
        self.popen, _ = self._starter(self.config, self.log_path, **popen)
        self._pid = self.popen.pid
        self.paused = False

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        if self._pid is None:
            return False
        try:
            return psutil.Process(self._pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def _wait(self, timeout: float) -> None:
        if self.popen is not None:
            self.popen.wait(timeout)
        elif self._pid is not None:
            try:
                psutil.Process(self._pid).wait(timeout)
            except psutil.NoSuchProcess:
                pass

    def kill(self) -> None:
        """SIGKILL, and wait until it is gone."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self._wait(30)
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
            self._wait(timeout)
        except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
            self.kill()


class DrillCluster(GroupViews):
    """A controller (`controller`) and the nodes `master`, `slave1`, `slave2` under `root`
    (with several broker groups, also b-master, b-slave1, ...: `groups` lists each group's
    nodes; `target.group_target` gives one group's view, whose `current_master()` is that
    group's). The names are the starting roles; the controller moves roles around during a
    drill, so `current_master()` asks the nodes. `fresh()` writes the configs and owns the processes
    (`close()` stops them); `attach()` drives a running `python -m cluster local` and leaves
    it running, with the pids of the processes it restarted written into its cluster.json."""

    def __init__(self, root: str, token_file: str, controller: DrillProcess,
                 nodes: list[DrillProcess], node_env: Mapping[str, Mapping[str, str]] | None = None,
                 cgroups: CgroupSet | None = None, attached: bool = False,
                 groups: Mapping[str, list[DrillProcess]] | None = None) -> None:
        self.root = root
        self.token_file = token_file
        self.token = read_token_file(token_file)
        self.controller, self.nodes = controller, nodes
        self.node_env = {k: dict(v) for k, v in (node_env or {}).items()}
        self.cgroups = cgroups
        self.attached = attached
        self._partitions: list[Partition] = []
        self._quotas: dict[str, CpuQuota] = {}  # process name -> its CPU quota
        self._links: list[tuple[Redirect, ProxyProcess]] = []
        self.by_name = {p.name: p for p in (self.controller, *self.nodes)}
        # broker name -> its nodes; a cluster of one group: every node in broker-a
        self.groups = {g: list(ps) for g, ps in groups.items()} if groups \
            else {group_names(1)[0]: list(nodes)}

    @classmethod
    def fresh(cls, root: str, base_port: int, role: str = "SYNC_MASTER",
              controller_props: Mapping[str, str] | None = None,
              node_env: Mapping[str, Mapping[str, str]] | None = None,
              partitions: bool = False,
              node_props: Mapping[str, str] | None = None,
              groups: int = 1) -> "DrillCluster":
        """A new cluster of `groups` broker groups in `root` on base_port.. (`python -m cluster
        local --groups N`'s configs and ports, plus `node_props` in every node's)."""
        root = os.path.abspath(root)
        os.makedirs(root, exist_ok=True)
        token_file = os.path.join(root, ADMIN_TOKEN_FILE)
        ensure_token_file(token_file)
        cgroups = CgroupSet(os.path.basename(root) + f"-{os.getpid()}") if partitions else None
        ctrl_port = base_port + local_cluster.CONTROLLER_PORT_OFFSET
        ctrl_conf = local_cluster.write_controller_config(root, ctrl_port, token_file)
        if controller_props:
            with open(ctrl_conf, "a", encoding="utf-8") as f:
                f.writelines(f"{k}={v}\n" for k, v in controller_props.items())
        controller = DrillProcess("controller", "controller", ctrl_conf,
                                  os.path.join(root, "controller.log"), f"127.0.0.1:{ctrl_port}",
                                  local_cluster.start_controller)
        configs = local_cluster.write_configs(root, base_port, role, token_file,
                                              controller.address, groups=groups)
        for _, conf, _ in configs:
            if node_props:
                with open(conf, "a", encoding="utf-8") as f:
                    f.writelines(f"{k}={v}\n" for k, v in node_props.items())
        nodes = [DrillProcess(name, "node", conf, os.path.join(root, f"{name}.log"), address,
                              local_cluster.start_node)
                 for name, conf, address in configs]
        group_of = {n.name: n.group for n in layout(base_port, groups)}
        by_group: dict[str, list[DrillProcess]] = {}
        for proc in nodes:
            by_group.setdefault(group_of[proc.name], []).append(proc)
        return cls(root, token_file, controller, nodes, node_env, cgroups, groups=by_group)

    @classmethod
    def attach(cls, cluster_dir: str) -> "DrillCluster":
        """The running cluster of a `python -m cluster local` folder (it needs its controller),
        every broker group of it."""
        info = local_cluster.read_cluster_info(cluster_dir)
        if "controller" not in info:
            raise local_cluster.ClusterFolderError(
                f"{cluster_dir} runs without a controller: drills need automatic failover")
        c = info["controller"]
        controller = DrillProcess("controller", "controller", c["config"], c["log"],
                                  c["address"], local_cluster.start_controller)
        controller.adopt(c["pid"])
        nodes, by_group = [], {}
        for group in local_cluster.cluster_groups(info):
            by_group[group] = []
            for n in local_cluster.nodes_of_group(info, group):
                proc = DrillProcess(n["name"], "node", n["config"], n["log"], n["address"],
                                    local_cluster.start_node)
                proc.adopt(n["pid"])
                nodes.append(proc)
                by_group[group].append(proc)
        cluster = cls(os.path.abspath(cluster_dir), info["token_file"], controller, nodes,
                      attached=True, groups=by_group)
        cluster.tls = local_cluster.cluster_tls(info)  # `cluster local --tls`: its CA
        return cluster

    # -- processes ---------------------------------------------------------------------------
    def controllers(self) -> list[DrillProcess]:
        return [self.controller]

    def processes(self) -> list[DrillProcess]:
        return [self.controller, *self.nodes]

    def kill(self, procs: list[DrillProcess]) -> None:
        """SIGKILL all of `procs` at once (then wait for each): they die together."""
        for proc in procs:
            if proc.alive():
                os.kill(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.kill()

    def start(self, proc: DrillProcess) -> None:
        popen: dict = {}
        env = self.node_env.get(proc.name)
        if env:
            popen["env"] = {**os.environ, **env}
        if self.cgroups is not None:
            popen["preexec_fn"] = self.cgroups.join_hook(proc.name)
        proc.start(**popen)
        if self.attached:
            self._record_pid(proc)

    def _record_pid(self, proc: DrillProcess) -> None:
        """Write a restarted process's pid into cluster.json, where `status` and the local
        cluster's shutdown find it."""
        info = local_cluster.read_cluster_info(self.root)
        entries = [info["controller"]] if proc.kind == "controller" else \
            [n for n in info["nodes"] if n["name"] == proc.name]
        for entry in entries:
            entry["pid"] = proc.pid
        local_cluster.write_cluster_info(self.root, info)

    def start_all(self, timeout: float = 30.0) -> None:
        """Start what is not running (all of a fresh cluster) and wait for every group whole."""
        for proc in self.processes():
            if not proc.alive():
                self.start(proc)
        wait_groups_whole(self, timeout)

    def close(self) -> None:
        self.heal_partitions()
        for name in list(self._quotas):
            self.unthrottle(self.by_name[name])
        self.heal_links()
        if self.attached:  # the operator's cluster: it keeps running
            return
        for proc in (*self.nodes, self.controller):
            proc.stop(10)
        if self.cgroups is not None:
            self.cgroups.close()

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

    # -- gray failures -------------------------------------------------------------------------
    def throttle(self, proc: DrillProcess, percent: float) -> None:
        """Limit `proc` (and its children) to `percent` of one CPU until unthrottle()."""
        quota = CpuQuota(proc.name, percent)
        quota.apply(proc.pid)
        self._quotas[proc.name] = quota

    def unthrottle(self, proc: DrillProcess) -> None:
        quota = self._quotas.pop(proc.name, None)
        if quota is not None:
            quota.release()

    def delay_link(self, proc: DrillProcess, to: DrillProcess) -> ProxyProcess:
        """Route `proc`'s connections to `to` through a delaying proxy in a process of its own
        (delay 0 until the caller sets one) until heal_links(): a firewall redirect from proc's
        cgroup, then proc's established connections to `to` are destroyed (`ss -K`), so that it
        reconnects through the proxy."""
        if self.cgroups is None:
            raise PartitionUnavailable("this cluster was started without partitions=True")
        host, _, port = to.address.rpartition(":")
        proxy = ProxyProcess((host, int(port)))
        cgroup = self.cgroups.path(proc.name)
        redirect = Redirect(f"{os.getpid()}-link-{len(self._links)}", cgroup, int(port),
                            proxy.port)
        try:
            redirect.apply()
        except PartitionUnavailable:
            proxy.close()
            raise
        self._links.append((redirect, proxy))
        subprocess.run(["ss", "-K", "-t", "cgroup", "/" + cgroup, "dport", "=", f":{port}"],
                       capture_output=True, check=False)
        return proxy

    def heal_links(self) -> None:
        while self._links:
            redirect, proxy = self._links.pop()
            redirect.heal()
            proxy.close()
