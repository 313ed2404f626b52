"""The gray-failure drills' machinery with real processes, sockets, cgroups and firewall rules:
a CPU quota moves a process tree into its group and back, the delaying proxy forwards both
ways in order (in its own process too), and a redirect sends one cgroup's new connections
through it while another process still connects directly."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from cluster.drills import cpu_quota, partition
from cluster.drills.cpu_quota import CpuQuota
from cluster.drills.delay_proxy import DelayProxy, ProxyProcess
from cluster.drills.partition import CgroupSet, Redirect
from tests.drills.test_partition import ECHO_SERVER, UNAVAILABLE

needs_root = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "available")

# A parent with a child, both spinning: the quota must take the whole tree.
SPINNER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
print(child.pid, flush=True)
while True:
    pass
"""


@pytest.fixture
def echo_port():
    server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE,
                              text=True)
    try:
        yield int(server.stdout.readline())
    finally:
        server.kill()
        server.wait()


def roundtrip(port: int, data: bytes = b"ping") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(data)
        got = b""
        while len(got) < len(data):
            got += c.recv(65536)
        return got


def cgroup_line(pid: int, v2: bool) -> str:
    with open(f"/proc/{pid}/cgroup", encoding="ascii") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if (v2 and controllers == "") or (not v2 and "cpu" in controllers.split(",")):
                return path
    return ""


@needs_root
def test_a_cpu_quota_takes_a_process_tree_and_gives_it_back():
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        child = int(proc.stdout.readline())
        quota = CpuQuota("test", 5)
        before = cgroup_line(proc.pid, quota.v2)
        assert sorted(quota.apply(proc.pid)) == sorted([proc.pid, child])
        group = "/" + os.path.relpath(quota.group, quota.root)
        assert cgroup_line(proc.pid, quota.v2) == group == cgroup_line(child, quota.v2)
        limit = os.path.join(quota.group, "cpu.max" if quota.v2 else "cpu.cfs_quota_us")
        with open(limit, encoding="ascii") as f:
            assert f.read().split()[0] == "5000"  # 5% of a 100 ms period
        quota.release()
        assert cgroup_line(proc.pid, quota.v2) == before == cgroup_line(child, quota.v2)
        assert not os.path.exists(quota.group)
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.wait()


@needs_root
def test_leftovers_are_the_groups_of_dead_owners_only():
    """A group of a drill still running (another test worker's, another terminal's) stays:
    removing it would lift that drill's fault in the middle of its measurement."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleeper = subprocess.Popen(["sleep", "60"])
    running = CpuQuota("running", 50)
    killed = os.path.join(running.root, f"{cpu_quota.GROUP_PREFIX}{dead.pid}-slave1")
    try:
        assert running.apply(sleeper.pid) == [sleeper.pid]
        os.makedirs(killed)
        assert cpu_quota.remove_leftovers() == [killed]
        assert not os.path.exists(killed)
        assert os.path.exists(running.group)
    finally:
        running.release()
        sleeper.kill()
        sleeper.wait()
        if os.path.exists(killed):
            os.rmdir(killed)
    assert not os.path.exists(running.group)


def test_the_proxy_forwards_both_ways_in_order_with_a_changeable_delay(echo_port):
    proxy = DelayProxy(("127.0.0.1", echo_port)).start()
    try:
        assert roundtrip(proxy.port) == b"ping"
        proxy.delay_s = 0.05
        data = bytes(range(256)) * 4096  # 1 MiB in many reads: order must hold
        assert roundtrip(proxy.port, data) == data
        with pytest.raises(ValueError):
            proxy.delay_s = -1
    finally:
        proxy.close()


def test_the_proxy_process(echo_port):
    proxy = ProxyProcess(("127.0.0.1", echo_port))
    try:
        proxy.delay_s = 0.02
        assert roundtrip(proxy.port) == b"ping"
        assert proxy.delay_s == 0.02
    finally:
        proxy.close()


# One connection per line on stdin to argv[1]: prints ok once the byte came back.
CONNECTOR = """
import socket, sys
for line in sys.stdin:
    try:
        with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as c:
            c.sendall(b"x"); print("ok" if c.recv(8) == b"x" else "bad", flush=True)
    except OSError as e:
        print("error", e, flush=True)
"""


@needs_root
def test_a_redirect_sends_one_cgroups_new_connections_through_the_proxy(echo_port):
    cgroups = CgroupSet(f"test-redirect-{os.getpid()}")
    proxy = DelayProxy(("127.0.0.1", echo_port)).start()
    connector = subprocess.Popen([sys.executable, "-c", CONNECTOR, str(echo_port)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 preexec_fn=cgroups.join_hook("slave"))
    redirect = Redirect(f"t{os.getpid()}", cgroups.path("slave"), echo_port, proxy.port)

    def connect() -> str:
        connector.stdin.write("\n")
        connector.stdin.flush()
        return connector.stdout.readline().strip()
    try:
        assert connect() == "ok" and proxy.accepted == 0
        redirect.apply()
        assert connect() == "ok" and proxy.accepted == 1  # through the proxy
        assert roundtrip(echo_port) == b"ping" and proxy.accepted == 1  # the test: direct
        redirect.heal()
        assert connect() == "ok" and proxy.accepted == 1
        assert f"{partition.COMMENT_PREFIX}t{os.getpid()}" not in subprocess.run(
            ["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True).stdout
    finally:
        redirect.heal()
        connector.kill()
        connector.wait()
        proxy.close()
        cgroups.close()
