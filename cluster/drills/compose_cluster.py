"""The drills' cluster as a docker compose project (deploy/docker-compose.yml): etcd, two
controllers (one active, one standby), broker groups of a master and two slaves (broker-a:
master, slave1, slave2; broker-b: b-master, b-slave1, b-slave2), each a container.

- `ComposeProject` owns the compose CLI for one project name and file: the container of a
  service (`ps -q`), `up`, `down -v`, the image build.
- `ContainerProcess` is one service's container behind the drills' process interface: kill is
  `docker kill` (SIGKILL to the whole container), pause/resume are `docker pause`/`unpause`
  (the cgroup freezer: a SIGSTOP of every process in it), start is `docker start`.
- `ComposeCluster` is the DrillTarget of one broker group (`group`, the project's first by
  default: broker-a), with etcd and the controllers. The groups are found among the project's
  services by `python -m cluster local`'s names and ports (cluster/assembly/local_layout.py:
  group k's nodes are <letter>-master, ... on 10911 + 100k, +10, +20); with `groups` > 1 the
  first that many groups are the drill's (`groups`: target.group_target gives each group's
  view). Its clients trust the project's CA
  (secrets/tls/ca.pem beside the compose file, made by its `certs` service) when it is there,
  and sign as the first admin account of secrets/plain_acl.yml (the nodes' ACL).
  Partitions disconnect a container from the project's
  network and reconnect it at its fixed address with its aliases. That cuts it from everything:
  published ports are forwarded (docker-proxy, iptables DNAT) to the container's address on
  that network, so the host's clients lose it too, unlike the local drill's firewall rules.
  It never starts or removes the project itself (the CLI's --up and the tests do): `close()`
  heals partitions, resumes what it paused and leaves the project running.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.admin.admin_token import read_token_file
from cluster.assembly.controller_process import ACTIVE_HEALTH_SERVICE
from cluster.assembly.local_layout import MAX_GROUPS, LocalNode, group_nodes
from cluster.drills.target import GroupViews, wait_groups_whole
from cluster.security.acl_file import admin_credentials
from cluster.security.tls import ClientTls, open_channel

DEPLOY_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "deploy")
DEFAULT_PROJECT = "deploy"  # what `docker-compose up` in deploy/ names the project
BASE_PORT = 10911  # the compose nodes' names and ports are `cluster local`'s from this base
NODE_PORTS = {n.name: n.port for n in group_nodes(BASE_PORT, 0)}  # broker-a's
CONTROLLERS = ("controller-a", "controller-b")
CONTROLLER_PORT = 9876
ETCD = "etcd"


class DockerError(RuntimeError):
    """A docker or compose command failed; the message has its output."""


def docker(*args: str, timeout: float = 60.0) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise DockerError(f"docker {' '.join(args)}: {(r.stderr or r.stdout).strip()}")
    return r.stdout


def compose_command() -> list[str] | None:
    """`docker compose` (the plugin) or `docker-compose`, None without Docker."""
    if shutil.which("docker") is None:
        return None
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


class ComposeProject:
    """One compose project: its name, its file (deploy/docker-compose.yml by default) and the
    token its services share (secrets/admin.token beside the file)."""

    def __init__(self, name: str = DEFAULT_PROJECT, compose_file: str | None = None) -> None:
        command = compose_command()
        if command is None:
            raise DockerError("needs Docker with docker compose (or docker-compose)")
        self.name = name
        self.file = os.path.abspath(compose_file or os.path.join(DEPLOY_DIR,
                                                                  "docker-compose.yml"))
        self.token_file = os.path.join(os.path.dirname(self.file), "secrets", "admin.token")
        self.tls_ca_file = os.path.join(os.path.dirname(self.file), "secrets", "tls", "ca.pem")
        self.acl_file = os.path.join(os.path.dirname(self.file), "secrets", "plain_acl.yml")
        self._compose = [*command, "-p", name, "-f", self.file]

    def run(self, *args: str, timeout: float = 120.0) -> str:
        r = subprocess.run([*self._compose, *args], capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            raise DockerError(f"compose -p {self.name} {' '.join(args)}: "
                              f"{(r.stderr or r.stdout).strip()}")
        return r.stdout

    def containers(self) -> dict[str, str]:
        """{service: container id} of the project's containers, running or not: one `docker
        ps` on compose's labels (docker-compose 1.29 and v2 set the same ones), not a compose
        call per service."""
        out = docker("ps", "-a", "--no-trunc", "--filter",
                     f"label=com.docker.compose.project={self.name}", "--format",
                     '{{.ID}} {{.Label "com.docker.compose.service"}}')
        found: dict[str, str] = {}
        for line in out.splitlines():
            cid, _, service = line.partition(" ")
            found.setdefault(service, cid)
        return found

    def container_id(self, service: str) -> str:
        found = self.containers().get(service)
        if not found:
            raise DockerError(f"service {service} of compose project {self.name} has no "
                              f"container: bring it up first (docker-compose -p {self.name} "
                              f"up -d, or drill --up)")
        return found

    def broker_groups(self) -> dict[str, list[LocalNode]]:
        """The broker groups whose three node services the project has, in order ({brokerName:
        its nodes' names and ports}): `cluster local`'s layout from BASE_PORT."""
        services = self.containers()
        groups = {}
        for k in range(MAX_GROUPS):
            nodes = group_nodes(BASE_PORT, k)
            if all(n.name in services for n in nodes):
                groups[nodes[0].group] = nodes
        return groups

    def build(self) -> None:
        """deploy/build: the images with the current code (seconds when only .py changed)."""
        build = os.path.join(os.path.dirname(self.file), "build")
        r = subprocess.run([build, "--python", sys.executable], capture_output=True, text=True,
                           timeout=900)
        if r.returncode != 0:
            raise DockerError(f"{build} failed:\n{r.stdout}{r.stderr}")

    def up(self, timeout: float = 300.0) -> None:
        """Up and healthy: compose waits for the healthchecks its depends_on name; the nodes'
        own health is waited for by the cluster's start_all."""
        self.run("up", "-d", timeout=timeout)

    def down(self) -> None:
        """Stop and remove the containers, the network and the volumes."""
        self.run("down", "-v", "--remove-orphans", "-t", "5")


class ContainerProcess:
    """A service's container: `address` is its published port on the host's 127.0.0.1 ("" when
    it publishes none), `paused` whether this drill paused it."""

    def __init__(self, name: str, container_id: str, address: str = "") -> None:
        self.name, self.id, self.address = name, container_id, address
        self.paused = False

    def _state(self, field: str) -> str:
        return docker("inspect", "--format", "{{.State." + field + "}}", self.id).strip()

    @property
    def pid(self) -> int:
        """The host pid of the container's first process (0 while it is not running)."""
        return int(self._state("Pid"))

    def alive(self) -> bool:
        return self._state("Running") == "true"  # a paused container is running too

    def start(self) -> None:
        docker("start", self.id)
        self.paused = False

    def kill(self) -> None:
        """docker kill (SIGKILL), and wait until the container is down."""
        kill_containers([self])

    def pause(self, attempts: int = 3) -> None:
        """docker pause (the cgroup freezer). runc gives up freezing when a task will not stop
        in time, e.g. in uninterruptible disk I/O on a loaded host ("unable to freeze"), and
        thaws the container again: that is the host's doing, not the drill's, so it is tried
        again a few times."""
        for attempt in range(1, attempts + 1):
            try:
                docker("pause", self.id)
                break
            except DockerError as e:
                if "unable to freeze" not in str(e) or attempt == attempts:
                    raise
                time.sleep(0.2 * attempt)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.alive():
            docker("unpause", self.id)
        self.paused = False

    def stop(self, timeout: float = 30.0) -> None:
        """docker stop: SIGTERM, SIGKILL after `timeout`."""
        self.resume()
        docker("stop", "-t", str(int(timeout)), self.id, timeout=timeout + 30)

    def network(self) -> tuple[str, str, list[str]]:
        """The container's (only) network, its fixed address there and its aliases."""
        networks = json.loads(docker("inspect", "--format", "{{json .NetworkSettings.Networks}}",
                                     self.id))
        if len(networks) != 1:
            raise DockerError(f"{self.name} is on {len(networks)} networks, expected one")
        (name, endpoint), = networks.items()
        ip = (endpoint.get("IPAMConfig") or {}).get("IPv4Address") or endpoint["IPAddress"]
        return name, ip, list(endpoint.get("Aliases") or [])


def kill_containers(procs: Sequence[ContainerProcess]) -> None:
    """One `docker kill` for all of them (they die together), then wait until each is down.
    No state check first: each docker call costs ~0.1 s, during which a master would still
    acknowledge after the drill recorded the fault."""
    for proc in procs:
        if proc.paused:
            proc.resume()
    try:
        docker("kill", *(p.id for p in procs))
    except DockerError as e:
        if "is not running" not in str(e):
            raise
    deadline = time.monotonic() + 30
    for proc in procs:
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.1)


def host_address(container_id: str, port: int) -> str:
    """Where the host reaches a container's `port`: its binding in the container's config (so
    it is known while the container is down too)."""
    bindings = json.loads(docker("inspect", "--format", "{{json .HostConfig.PortBindings}}",
                                 container_id)) or {}
    for b in bindings.get(f"{port}/tcp") or []:
        return f"{b.get('HostIp') or '127.0.0.1'}:{b['HostPort']}"
    raise DockerError(f"container {container_id[:12]} publishes no port {port}")


class _Cut:
    """A container taken off its network, and how to put it back."""

    def __init__(self, proc: ContainerProcess) -> None:
        self.proc = proc
        self.network, self.ip, self.aliases = proc.network()
        docker("network", "disconnect", self.network, proc.id)

    def heal(self) -> None:
        aliases = [a for alias in self.aliases for a in ("--alias", alias)]
        docker("network", "connect", "--ip", self.ip, *aliases, self.network, self.proc.id)


class ComposeCluster(GroupViews):
    """The services of a running compose project as the DrillTarget of one broker group
    (`group`, default the first: broker-a): `nodes` are its master and slaves, `processes()`
    etcd, the controllers and them. `root` is where the drill keeps its history; the cluster's
    data is in the project's volumes."""

    attached = True  # the operator's project: topics named per run, left running

    def __init__(self, project: ComposeProject, root: str, group: str | None = None, *,
                 groups: int = 1) -> None:
        """`group`: the broker group drilled (default the first); `groups` > 1: the first that
        many groups, all of them the drills' (`--groups N`: the load on every one, the fault
        in one, target.group_target)."""
        self.project = project
        self.root = os.path.abspath(root)
        self.token = read_token_file(project.token_file)
        self.tls = ClientTls(project.tls_ca_file) if os.path.exists(project.tls_ca_file) \
            else None
        self.credentials = admin_credentials(project.acl_file)
        ids = project.containers()
        layout = project.broker_groups()
        if not layout:
            raise DockerError(f"compose project {project.name} has no broker group (services "
                              f"{', '.join(NODE_PORTS)}): bring it up first (drill --up)")
        self.group = group or next(iter(layout))
        if self.group not in layout:
            raise DockerError(f"compose project {project.name} has no broker group "
                              f"{self.group!r} (it has {', '.join(layout)})")
        self.etcd = ContainerProcess(ETCD, project.container_id(ETCD))
        self._controllers = [self._service(ids, n, CONTROLLER_PORT) for n in CONTROLLERS]
        self._groups = {g: [self._service(ids, n.name, n.port) for n in nodes]
                        for g, nodes in layout.items()}
        if groups > len(layout):
            raise DockerError(f"compose project {project.name} runs {len(layout)} broker "
                              f"group(s) ({', '.join(layout)}), not {groups}")
        # The drills' view (target.GroupTarget): the groups this target drills, every node
        # of them in `nodes`.
        self.groups = ({self.group: list(self._groups[self.group])} if groups == 1 else
                       {g: list(self._groups[g]) for g in list(layout)[:groups]})
        self.nodes = [p for nodes in self.groups.values() for p in nodes]
        self.by_name = {p.name: p for p in self.processes()}
        self._last_active = self._controllers[0]
        self._cuts: list[_Cut] = []

    def _service(self, ids: dict[str, str], name: str, port: int) -> ContainerProcess:
        cid = ids.get(name) or self.project.container_id(name)  # that one says it is missing
        return ContainerProcess(name, cid, host_address(cid, port))

    # -- processes ---------------------------------------------------------------------------
    @property
    def controller(self) -> ContainerProcess:
        """The active controller (its health service says so); while none is, the one that was
        last seen active."""
        for proc in self._controllers:
            if _is_active(proc, self.tls):
                self._last_active = proc
                return proc
        return self._last_active

    def controllers(self) -> list[ContainerProcess]:
        return list(self._controllers)

    def processes(self) -> list[ContainerProcess]:
        return [self.etcd, *self._controllers, *self.nodes]

    def kill(self, procs: list[ContainerProcess]) -> None:
        kill_containers(procs)

    def start(self, proc: ContainerProcess) -> None:
        proc.start()

    def start_all(self, timeout: float = 60.0) -> None:
        """Start (or resume) what is not running and wait for a master with both slaves."""
        for proc in self.processes():
            if not proc.alive():
                proc.start()
            elif proc.paused:
                proc.resume()
        wait_groups_whole(self, timeout)

    def close(self) -> None:
        self.heal_partitions()
        for proc in [*self.processes(), *(p for nodes in self._groups.values() for p in nodes)]:
            if proc.paused:
                proc.resume()

    # -- partitions ----------------------------------------------------------------------------
    def partition(self, a: list[ContainerProcess], b: Sequence[ContainerProcess]) -> list[_Cut]:
        """Cut each of `a` off the project's network until heal_partitions(). This cuts it from
        everything, `b` and the host's clients alike (see the module docstring)."""
        cuts = [_Cut(proc) for proc in a]
        self._cuts.extend(cuts)
        return cuts

    def heal_partitions(self) -> None:
        while self._cuts:
            self._cuts.pop().heal()

    # -- gray failures -------------------------------------------------------------------------
    def throttle(self, proc: ContainerProcess, percent: float) -> None:
        """The container's CPU quota (docker update --cpus: a cgroup quota, as locally)."""
        docker("update", "--cpus", f"{percent / 100:.3f}", proc.id)

    def unthrottle(self, proc: ContainerProcess) -> None:
        # Every CPU of the Docker host: `--cpus 0` would leave the quota as it was (docker
        # update changes only what is above 0), and the slave stayed at 5% after the fault.
        cpus = docker("info", "--format", "{{.NCPU}}").strip()
        docker("update", "--cpus", cpus, proc.id)


def _is_active(proc: ContainerProcess, tls: ClientTls | None) -> bool:
    if proc.paused:
        return False
    try:
        with open_channel(proc.address, tls) as channel:
            r = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=ACTIVE_HEALTH_SERVICE), timeout=1.0)
    except grpc.RpcError:
        return False
    return r.status == health_pb2.HealthCheckResponse.SERVING
