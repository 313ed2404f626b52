"""Finding the processes a node starts itself."""
from __future__ import annotations

import psutil


# The processes a node may start: its index process (store/index_process.py) and its encode
# process (cluster/messaging/encode_process.py), by the module each runs.
HELPER_MODULES = {"index": "store.index_worker", "encode": "cluster.messaging.encode_worker"}


def helper_pids(node_pid: int) -> dict[str, int]:
    """The pids of a node's helper processes by name ("index", "encode"); one the node does not
    run is missing. Their CPU belongs to the node's figures: the work moved there, it did not
    go away."""
    found = {}
    for child in psutil.Process(node_pid).children():
        try:
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        for name, module in HELPER_MODULES.items():
            if module in cmdline:
                found[name] = child.pid
    return found


def index_process_pid(node_pid: int) -> int | None:
    """The pid of a node's index process, None when the node builds its index itself."""
    return helper_pids(node_pid).get("index")
