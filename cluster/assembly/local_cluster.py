"""`python -m cluster local`: a controller, a master and two slaves as processes on 127.0.0.1
(`--groups N`: N broker groups of a master and two slaves, broker-a, broker-b, ..., under the
one controller, which routes every group's queues: cluster/controller/route_registry.py).

Data lives under one folder (default data/cluster): one store per node, the controller's state,
the configs everything was started with, a shared admin token and cluster secret (both mode
0600, generated once) and `cluster.json`
(addresses, pids, logs, token path) that `python -m cluster status` reads. Ctrl-C (or SIGTERM)
stops everything cleanly.

With the controller (the default) the nodes take their roles from it: kill the master and a
slave takes over within seconds; a node that exits is reported and the others go on (restart
it with the command printed). `--no-controller` runs the fixed roles of brokerRole instead, and
then one node exiting stops the others.

Ports: the nodes listen on base, base+10 and base+20; the controller on base+30; each serves
Prometheus metrics on its port + 5 (cluster/metrics/); with
`--archive` an archive server on base+40 (cluster/assembly/local_archive.py: the short retention
demo). Group k's nodes (k >= 1) listen on base + 100k, +10, +20 and are named b-master,
b-slave1, b-slave2 (c-..., ...): local_layout.py.

`--tls`: a throwaway CA and a certificate per node, for the controller and for the operator's
tools are made (or reused) in <dir>/tls/ (cluster/security/cert_authority.py), every port
serves TLS (the metrics and console ports HTTPS, with the same certificates), nodes call each
other and the controller over TLS, and cluster.json names the CA (`tls`), so
`python -m cluster status --cluster-dir <dir>` and the other commands use it.
Clients need no certificate (tlsServerNeedClientAuth stays false: the official clients present
none); the official clients need `tls_enable=True` and GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=<the CA>.

`--acl FILE`: every node checks client calls against that RocketMQ plain_acl.yml (aclEnable,
aclFile; checked before anything starts), re-reading it when it changes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from common.config_values import ConfigError
from store.broker_role import BrokerRole
from store.layout import ADMIN_TOKEN_FILE

from cluster.admin.admin_token import ensure_token_file, read_token_file
from cluster.client.admin_client import AdminClient
from . import local_archive
from .local_layout import (CONTROLLER_PORT_OFFSET, METRICS_PORT_OFFSET, LocalNode,
                           check_groups, group_names, layout)
from .local_layout import free_base_port  # noqa: F401 - the tests' and drills' import
from cluster.security.cert_authority import ensure_ca, ensure_leaf, target_names
from cluster.security.acl_file import read_acl_file
from cluster.security.tls import ClientTls

# {"token_file": path, "groups": [brokerName, ...] (in order),
#  "nodes": [{"name", "group", "address", ...}], "controller": {...},
#  "tls": {"ca_file", "cert_file", "key_file"} (only with --tls: what operator tools use)}
# A folder written before groups existed has neither "groups" nor "group": one group.
CLUSTER_INFO_FILE = "cluster.json"
TLS_DIR = "tls"


class ClusterFolderError(Exception):
    """A cluster folder whose cluster.json cannot be read."""


def read_cluster_info(cluster_dir: str) -> dict:
    """The cluster.json a running local cluster wrote into its folder (its nodes' names,
    addresses, pids and logs; the token file); ClusterFolderError says why it cannot be read."""
    path = os.path.join(cluster_dir, CLUSTER_INFO_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ClusterFolderError(f"cannot read {path}: {e}") from None


def cluster_groups(info: dict) -> list[str]:
    """The broker groups of a cluster.json, in order (one, unnamed "", in an old folder)."""
    groups = info.get("groups")
    if groups:
        return list(groups)
    return list(dict.fromkeys(n.get("group", "") for n in info.get("nodes", []))) or [""]


def nodes_of_group(info: dict, group: str | None = None) -> list[dict]:
    """The node entries of one group of a cluster.json (None: the first group); a node
    without "group" (an old folder) is of the first group. ClusterFolderError for a group the
    folder does not have."""
    groups = cluster_groups(info)
    wanted = groups[0] if group is None else group
    if wanted not in groups:
        raise ClusterFolderError(f"no broker group {group!r} in the cluster folder (groups: "
                                 f"{', '.join(groups)})")
    return [n for n in info.get("nodes", []) if n.get("group", groups[0]) == wanted]


def cluster_tls(info: dict) -> ClientTls | None:
    """What a client of the cluster folder's nodes uses for TLS (None: plaintext)."""
    tls = info.get("tls")
    if not tls:
        return None
    return ClientTls(tls.get("ca_file", ""), tls.get("cert_file", ""), tls.get("key_file", ""))


def ensure_tls(root: str, names: list[str],
               group_addresses: list[list[str]]) -> tuple[str, dict[str, list[str]]]:
    """The CA path and the tls* config lines per name (every node, the controller, the
    operator), certificates made or reused in <root>/tls for 127.0.0.1 and for clients given
    several addresses of one group at once (`group_addresses`, per group: a route lists every
    node of the group)."""
    folder = os.path.abspath(os.path.join(root, TLS_DIR))
    ca = ensure_ca(folder, "LocalCluster")
    dns = tuple(name for addresses in group_addresses for name in target_names(addresses))
    lines = {}
    for name in names:
        leaf = ensure_leaf(folder, name, ca, dns=dns)
        lines[name] = ["tlsEnable=true", f"tlsServerCertPath={leaf.cert_path}",
                       f"tlsServerKeyPath={leaf.key_path}",
                       f"tlsServerTrustCertPath={ca.cert_path}"]
    return ca.cert_path, lines


def write_cluster_info(cluster_dir: str, info: dict) -> None:
    """Replace cluster.json atomically (a reader never sees half a file)."""
    path = os.path.join(cluster_dir, CLUSTER_INFO_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    os.replace(path + ".tmp", path)


def _pids_restarted_by_others(cluster_dir: str, own: set[int]) -> list[int]:
    """Pids in cluster.json that this process did not start (a drill restarted them)."""
    try:
        info = read_cluster_info(cluster_dir)
    except ClusterFolderError:
        return []
    entries = [*info.get("nodes", []), *([info["controller"]] if "controller" in info else [])]
    return [e["pid"] for e in entries if e.get("pid") and e["pid"] not in own]


CLUSTER_SECRET_FILE = "cluster.secret"
# Under a controller a failover waits for silent slaves to leave the sync state set: heartbeat
# every second and drop a slave that has not caught up for 3 s (RocketMQ: 5 s and 15 s).
CONTROLLED_HA_KEYS = ("haSendHeartbeatInterval=1000", "haMaxTimeSlaveNotCatchup=3000",
                      "haHousekeepingInterval=5000")


def ensure_cluster_secret(root: str) -> str:
    """The path of the cluster folder's shared secret (mode 0600, generated once): every node
    and the controller prove membership with it (cluster/security/member_proof.py)."""
    path = os.path.abspath(os.path.join(root, CLUSTER_SECRET_FILE))
    ensure_token_file(path)
    return path


def write_configs(root: str, base_port: int, role: str, token_file: str,
                  controller_address: str = "",
                  tls: dict[str, list[str]] | None = None,
                  groups: int = 1) -> list[tuple[str, str, str]]:
    """(name, config path, address) per node of `groups` groups (local_layout.py); `tls`:
    more lines per node name (ensure_tls's, and the ACL's)."""
    nodes = layout(base_port, groups)
    masters = {n.group: n.address for n in nodes if n.broker_id == 0}
    return [(node.name, write_node_config(root, node, role, token_file, controller_address,
                                          masters[node.group], (tls or {}).get(node.name, [])),
             node.address)
            for node in nodes]


def write_node_config(root: str, node: LocalNode, role: str, token_file: str,
                      controller_address: str, master_address: str, more: list[str]) -> str:
    """<root>/<name>.conf of one node (`master_address`: its group's first master, followed
    without a controller); its path."""
    lines = [
        "brokerClusterName=LocalCluster", f"brokerName={node.group}",
        f"brokerId={node.broker_id}",
        f"brokerRole={role if node.broker_id == 0 else BrokerRole.SLAVE}",
        f"storePathRootDir={os.path.abspath(os.path.join(root, node.name))}",
        "brokerIP1=127.0.0.1", f"listenPort={node.port}",
        f"adminTokenFile={os.path.abspath(token_file)}",
        f"clusterSecretFile={ensure_cluster_secret(root)}",
        f"metricsListenAddress=127.0.0.1:{node.port + METRICS_PORT_OFFSET}",
        # small files so a demo shows rolling; production keeps RocketMQ's 1 GiB
        f"mappedFileSizeCommitLog={64 * 1024 * 1024}",
    ]
    if controller_address:
        lines += [f"controllerAddr={controller_address}", *CONTROLLED_HA_KEYS]
    elif node.broker_id:
        lines.append(f"haMasterAddress={master_address}")
    lines += more
    path = os.path.join(root, f"{node.name}.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _start(argv: list[str], log_path: str, what: str,
           **popen: Any) -> tuple[subprocess.Popen, dict]:
    """Start a process that prints one JSON line when it serves; (process, that line).
    `popen`: more subprocess.Popen arguments (env, preexec_fn)."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cluster", *argv], stdout=subprocess.PIPE,
                                stderr=log, start_new_session=True, **popen)
    try:
        line = proc.stdout.readline() if proc.stdout else b""
    except BaseException:  # e.g. SystemExit from a drill's SIGTERM: the caller never gets it
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    if not line:
        proc.wait(10)
        raise RuntimeError(f"{what} exited ({proc.returncode}); see {log_path}")
    return proc, json.loads(line)


def start_node(config_path: str, log_path: str, **popen: Any) -> tuple[subprocess.Popen, dict]:
    return _start(["node", "--config", config_path], log_path, f"node with {config_path}",
                  **popen)


def write_controller_config(root: str, port: int, token_file: str,
                            tls_lines: list[str] = ()) -> str:
    path = os.path.join(root, "controller.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"listenAddress=127.0.0.1:{port}\n"
                f"controllerStorePath={os.path.abspath(os.path.join(root, 'controller'))}\n"
                f"adminTokenFile={os.path.abspath(token_file)}\n"
                f"clusterSecretFile={ensure_cluster_secret(root)}\n"
                f"metricsListenAddress=127.0.0.1:{port + METRICS_PORT_OFFSET}\n")
        f.write("".join(line + "\n" for line in tls_lines))
    return path


def start_controller(config_path: str, log_path: str,
                     **popen: Any) -> tuple[subprocess.Popen, dict]:
    return _start(["controller", "--config", config_path], log_path,
                  f"controller with {config_path}", **popen)


def _wait_for_roles(cluster_info: dict, token_file: str, timeout: float = 20.0) -> None:
    """Until the controller made one node master and the others follow it (the roles printed
    are then the ones the nodes have), or `timeout`."""
    token = read_token_file(token_file)
    tls = cluster_tls(cluster_info)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        roles = []
        for n in cluster_info["nodes"]:
            with AdminClient(n["address"], token, timeout=2, tls=tls) as client:
                try:
                    roles.append(client.status().role)
                except Exception:  # noqa: BLE001 - not up yet: look again
                    roles.append("")
        if "TRANSITIONING" not in roles and "" not in roles:
            for n, role in zip(cluster_info["nodes"], roles):
                n["role"] = role
            return
        time.sleep(0.2)


def acl_lines(acl_file: str) -> list[str]:
    """The node config lines that turn ACL on with `acl_file`, checked first (a clear error
    now instead of three nodes that refuse to start)."""
    path = os.path.abspath(acl_file)
    read_acl_file(path)  # ConfigError naming the line and field
    return ["aclEnable=true", f"aclFile={path}"]


def run_local(root: str, base_port: int, role: str, controller: bool = True,
              tls: bool = False, acl_file: str = "", archive: bool = False,
              groups: int = 1) -> int:
    check_groups(groups)
    if groups > 1 and not controller:
        raise ConfigError("--groups needs the controller: it routes every group's queues "
                          "(drop --no-controller)")
    acl = acl_lines(acl_file) if acl_file else []
    os.makedirs(root, exist_ok=True)
    token_file = os.path.join(root, ADMIN_TOKEN_FILE)
    ensure_token_file(token_file)
    controller_address = f"127.0.0.1:{base_port + CONTROLLER_PORT_OFFSET}" if controller else ""
    planned = layout(base_port, groups)
    names = group_names(groups)
    ca_file, tls_lines = ensure_tls(
        root, [n.name for n in planned] + ["controller", "operator", "archive"],
        [[n.address for n in planned if n.group == g] for g in names]) if tls else ("", {})
    demo = local_archive.node_archive_lines(base_port) if archive else []
    node_lines = {n.name: [*tls_lines.get(n.name, []), *acl, *demo] for n in planned}
    nodes = write_configs(root, base_port, role, token_file, controller_address, node_lines,
                          groups)
    group_of = {n.name: n.group for n in planned}
    procs: list[tuple[str, subprocess.Popen]] = []
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster_info: dict = {"token_file": os.path.abspath(token_file), "groups": names,
                              "nodes": []}
        if tls:
            operator = os.path.join(os.path.dirname(ca_file), "operator")
            cluster_info["tls"] = {"ca_file": ca_file, "cert_file": operator + ".pem",
                                   "key_file": operator + ".key"}
        if controller:
            conf = write_controller_config(root, base_port + CONTROLLER_PORT_OFFSET, token_file,
                                           tls_lines.get("controller", []))
            log_path = os.path.abspath(os.path.join(root, "controller.log"))
            proc, ready = start_controller(conf, log_path)
            procs.append(("controller", proc))
            cluster_info["controller"] = {"address": ready["address"], "pid": ready["pid"],
                                          "metrics": ready.get("metrics", ""),
                                          "config": os.path.abspath(conf), "log": log_path}
        if archive:
            conf = local_archive.write_archive_config(root, base_port, ensure_cluster_secret(root),
                                                      tls_lines.get("archive", []),
                                                      controller_address)
            log_path = os.path.abspath(os.path.join(root, "archive.log"))
            proc, ready = local_archive.start_archive(_start, conf, log_path)
            procs.append(("archive", proc))
            cluster_info["archive"] = {"address": ready["address"], "http": ready["http"],
                                       "metrics": ready.get("metrics", ""),
                                       "pid": ready["pid"], "config": os.path.abspath(conf),
                                       "log": log_path, "token_file": ready["admin_token"]}
        for name, conf, address in nodes:
            log_path = os.path.abspath(os.path.join(root, f"{name}.log"))
            proc, ready = start_node(conf, log_path)
            procs.append((name, proc))
            cluster_info["nodes"].append({"name": name, "group": group_of[name],
                                          "address": ready["address"],
                                          "pid": ready["pid"], "role": ready["role"],
                                          "metrics": ready.get("metrics", ""),
                                          "config": os.path.abspath(conf), "log": log_path})
        write_cluster_info(root, cluster_info)
        if controller:
            _wait_for_roles(cluster_info, token_file)
        print(f"local cluster up (data under {os.path.abspath(root)}):")
        width = max(7, *(len(n["name"]) for n in cluster_info["nodes"]))

        def row(name: str, group: str, role: str, entry: dict) -> str:
            column = f"{group:<9} " if groups > 1 else ""  # one group: as it always was
            return (f"  {name:<{width}} {column}{role:<14} {entry['address']:<16} "
                    f"pid {entry['pid']}  log {entry['log']}")
        if controller:
            print(row("ctrl", "", "CONTROLLER", cluster_info["controller"]))
        for n in cluster_info["nodes"]:
            print(row(n["name"], n["group"], n["role"], n))
        if archive:
            a = cluster_info["archive"]
            print(f"{row('archive', '', 'ARCHIVE', a)}  (HTTP {a['http']}, token "
                  f"{a['token_file']})")
            print("  each 8 MiB commitlog file goes to the archive as soon as it is sealed, "
                  "then retention deletes it: .venv/bin/python -m cluster history query ...")
        metrics = [e.get("metrics") for e in [cluster_info.get("controller", {}),
                                              *cluster_info["nodes"],
                                              cluster_info.get("archive", {})] if e.get("metrics")]
        scheme = "https" if tls else "http"  # the same certificates as the gRPC ports
        print(f"metrics:     {', '.join(f'{scheme}://{m}/metrics' for m in metrics)}")
        print(f"admin token: {os.path.abspath(token_file)}")
        print(f"cluster secret (replication and controller peers prove it): "
              f"{ensure_cluster_secret(root)}")
        if tls:
            print(f"TLS CA:      {ca_file} (every port serves TLS; certificates in "
                  f"{os.path.dirname(ca_file)})")
            print(f"official clients (tls_enable=True): "
                  f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca_file}")
        if groups > 1:
            print(f"groups:      {', '.join(names)} (one route: python -m cluster topic route "
                  f"NAME --cluster-dir {root}; topics across groups: python -m cluster topic "
                  f"create NAME --groups all --cluster-dir {root})")
        if acl:
            print(f"ACL:         {acl[1].partition('=')[2]} (clients sign as its users: "
                  f"--access-key/--secret-key, or Credentials(...) in the official clients)")
        print(f"status:      .venv/bin/python -m cluster status --cluster-dir {root}")
        print("Ctrl-C stops everything cleanly.", flush=True)
        reported: set[str] = set()
        while not stop.wait(1.0):
            for name, proc in procs:
                if proc.poll() is None or name in reported:
                    continue
                reported.add(name)
                if not controller:
                    print(f"{name} exited with {proc.returncode}; stopping the others", flush=True)
                    stop.set()
                else:
                    print(f"{name} exited with {proc.returncode}; the others go on (restart it: "
                          f"python -m cluster {name if name in ('controller', 'archive') else 'node'} "
                          f"--config {os.path.join(root, name + '.conf')})", flush=True)
        return 0
    finally:
        for pid in _pids_restarted_by_others(root, {p.pid for _, p in procs}):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for _, proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for _, proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        print("local cluster stopped", flush=True)
