"""What one sequential SendMessage costs the server: an ASYNC_MASTER node against the bare
MessagingService (gRPC + protobuf, no store), side by side in interleaved rounds.

Each round sends N raw SendMessage calls (one 1 KiB message, no client library, each answer
awaited) to the node, then to the bare service, and prints the call's p50 / p99 and the
server process's CPU per call. Then the node's CPU per call thread by thread (psutil), named
when py-spy is installed (`py-spy dump` knows the Python names): which of the node's threads
the per-request cost lands on (the event loop, reput, the flush service, gRPC's poller).

    .venv/bin/python -m tests.perf.unary_cost                 # 3 rounds of 2,000 calls
    .venv/bin/python -m tests.perf.unary_cost --rounds 5 --calls 1000 --set KEY=VALUE
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import psutil

from tests.integration.harness import Group, free_port
from tests.perf import messaging_load as load
from tests.perf.host_load import CpuWindow


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _thread_names(pid: int) -> dict[int, str]:
    """Python thread names by native id, from py-spy when it is installed (else empty)."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return {}
    out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                         check=False).stdout
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)}


def _comm(pid: int, tid: int) -> str:
    """The kernel's name of a thread: gRPC's own threads name themselves (event_engine)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _thread_cpu(proc: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in proc.threads()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker.conf key of the node")
    args = parser.parse_args(argv)
    props = dict(kv.split("=", 1) for kv in args.set)
    root = tempfile.mkdtemp(prefix="unary-cost-")
    group = Group(root)
    bare = None
    try:
        node = group.master("ASYNC_MASTER", **props)
        bare = load.BareServer(free_port())
        servers = (("node", node.address, node.pid), ("bare", bare.address, bare.proc.pid))
        load.bare_unary(node.address, 300, warmup=0)  # the topic, the files, the caches
        print(f"sequential raw SendMessage, one 1 KiB message, {args.calls} calls a round")
        print(f"{'round':>5}  {'server':<6} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/call':>12}")
        threads_before = _thread_cpu(psutil.Process(node.pid))
        node_calls = 0
        for r in range(1, args.rounds + 1):
            for name, address, pid in servers:
                with CpuWindow({"server": pid}) as cpu:
                    samples = load.bare_unary(address, args.calls, warmup=0)
                if name == "node":
                    node_calls += len(samples)
                per_call = cpu.used["server"] / len(samples) * 1e6
                print(f"{r:>5}  {name:<6} {statistics.median(samples):>8.3f} "
                      f"{_percentile(samples, 0.99):>8.3f} {per_call:>12.0f}", flush=True)
        # The node's threads over all its rounds (the bare rounds in between leave it idle:
        # its idle CPU is in these figures, about 1% of a core here).
        after = _thread_cpu(psutil.Process(node.pid))
        names = _thread_names(node.pid)
        rows = sorted(((after[t] - threads_before.get(t, 0.0)) / node_calls * 1e6, t)
                      for t in after)
        print("\nnode CPU per call by thread (all rounds):")
        for us, tid in reversed(rows):
            if us >= 1.0:
                print(f"  {us:7.1f} us  {names.get(tid) or _comm(node.pid, tid)} ({tid})")
    finally:
        if bare is not None:
            bare.close()
        group.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
