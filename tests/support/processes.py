"""Finding the processes a node starts itself."""
from __future__ import annotations

import psutil


def index_process_pid(node_pid: int) -> int | None:
    """The pid of a node's index process (store/index_process.py: a child running
    store.index_worker), None when the node builds its index itself. Its CPU belongs to the
    node's figures: the work moved there, it did not go away."""
    for child in psutil.Process(node_pid).children():
        try:
            if "store.index_worker" in child.cmdline():
                return child.pid
        except psutil.Error:
            continue
    return None
