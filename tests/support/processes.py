"""Finding the processes a node starts itself; stopping a child by its pid."""
from __future__ import annotations

import os
import signal
import subprocess

import psutil


def index_process_pid(node_pid: int) -> int | None:
    """The pid of a node's index process (store/index/index_process.py: a child running
    store.index.index_worker), None when the node builds its index itself. Its CPU belongs to the
    node's figures: the work moved there, it did not go away."""
    return child_running(node_pid, "store.index.index_worker")


def conversion_process_pid(node_pid: int) -> int | None:
    """The pid of a node's conversion process (cluster/consume/conversion_process.py), None
    before its first delivery or with receiveConversionProcessEnable=false."""
    return child_running(node_pid, "cluster.consume.conversion_worker")


def child_running(node_pid: int, module: str) -> int | None:
    """The pid of the child of `node_pid` running `python -m module`, or None."""
    for child in psutil.Process(node_pid).children():
        try:
            if module in child.cmdline():
                return child.pid
        except psutil.Error:
            continue
    return None


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM a child process we started, by its pid; SIGKILL after `grace` seconds."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
