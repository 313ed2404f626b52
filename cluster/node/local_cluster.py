"""`python -m cluster local`: a master and two slaves as processes on 127.0.0.1.

Data lives under one folder (default data/cluster): one store per node, the configs the nodes
were started with, a shared admin token (mode 0600) and `cluster.json` (addresses, pids, token
path) that `python -m cluster status` reads. Ctrl-C (or SIGTERM) stops the nodes cleanly.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from store.broker_role import BrokerRole
from store.layout import ADMIN_TOKEN_FILE

from cluster.admin.admin_token import ensure_token_file

CLUSTER_INFO_FILE = "cluster.json"  # {"token_file": path, "nodes": [{"name", "address", ...}]}


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


NODES = (("master", 0), ("slave1", 1), ("slave2", 2))


def write_configs(root: str, base_port: int, role: str, token_file: str) -> list[tuple[str, str, str]]:
    """(name, config path, address) per node."""
    master_address = f"127.0.0.1:{base_port}"
    out = []
    for i, (name, broker_id) in enumerate(NODES):
        address = f"127.0.0.1:{base_port + 10 * i}"
        lines = [
            "brokerClusterName=LocalCluster", "brokerName=broker-a", f"brokerId={broker_id}",
            f"brokerRole={role if broker_id == 0 else BrokerRole.SLAVE}",
            f"storePathRootDir={os.path.abspath(os.path.join(root, name))}",
            "brokerIP1=127.0.0.1", f"listenPort={base_port + 10 * i}",
            f"adminTokenFile={os.path.abspath(token_file)}",
            # small files so a demo shows rolling; production keeps RocketMQ's 1 GiB
            f"mappedFileSizeCommitLog={64 * 1024 * 1024}",
        ]
        if broker_id:
            lines.append(f"haMasterAddress={master_address}")
        path = os.path.join(root, f"{name}.conf")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        out.append((name, path, address))
    return out


def start_node(config_path: str, log_path: str) -> tuple[subprocess.Popen, dict]:
    log = open(log_path, "ab")
    proc = subprocess.Popen([sys.executable, "-m", "cluster", "node", "--config", config_path],
                            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    line = proc.stdout.readline() if proc.stdout else b""
    if not line:
        proc.wait(10)
        raise RuntimeError(f"node with {config_path} exited ({proc.returncode}); see {log_path}")
    return proc, json.loads(line)


def run_local(root: str, base_port: int, role: str) -> int:
    os.makedirs(root, exist_ok=True)
    token_file = os.path.join(root, ADMIN_TOKEN_FILE)
    ensure_token_file(token_file)
    nodes = write_configs(root, base_port, role, token_file)
    procs: list[subprocess.Popen] = []
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        info = []
        for name, conf, address in nodes:
            proc, ready = start_node(conf, os.path.join(root, f"{name}.log"))
            procs.append(proc)
            info.append({"name": name, "address": ready["address"], "pid": ready["pid"],
                         "role": ready["role"], "config": os.path.abspath(conf),
                         "log": os.path.abspath(os.path.join(root, f"{name}.log"))})
        with open(os.path.join(root, CLUSTER_INFO_FILE), "w", encoding="utf-8") as f:
            json.dump({"token_file": os.path.abspath(token_file), "nodes": info}, f, indent=2)
        print(f"local cluster up (data under {os.path.abspath(root)}):")
        for n in info:
            print(f"  {n['name']:<7} {n['role']:<12} {n['address']:<16} pid {n['pid']}  log {n['log']}")
        print(f"admin token: {os.path.abspath(token_file)}")
        print(f"status:      .venv/bin/python -m cluster status --cluster-dir {root}")
        print("Ctrl-C stops the nodes cleanly.", flush=True)
        while not stop.wait(1.0):
            for proc, (name, _, _) in zip(procs, nodes):
                if proc.poll() is not None:
                    print(f"{name} exited with {proc.returncode}; stopping the others", flush=True)
                    stop.set()
        return 0
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        print("local cluster stopped", flush=True)
