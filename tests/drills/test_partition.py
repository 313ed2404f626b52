"""Partitions with real firewall rules and cgroups: two processes lose their established
connection while the test process still reaches the server, and everything comes back after
heal(); nothing is left behind."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from cluster.drills import partition
from cluster.drills.partition import CgroupSet, Member, Partition

try:
    partition.check_available()
    UNAVAILABLE = ""
except partition.PartitionUnavailable as e:
    UNAVAILABLE = str(e)

pytestmark = pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "available")

ECHO_SERVER = """
import socket, sys, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0)); srv.listen(8)
print(srv.getsockname()[1], flush=True)
def serve(c):
    while (data := c.recv(64)):
        c.sendall(data)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

# One connection (a new one after a failure), one ping a line on stdin: prints ok or timeout.
PINGER = """
import socket, sys
port = int(sys.argv[1])
c = socket.create_connection(("127.0.0.1", port), timeout=1.0)
for line in sys.stdin:
    try:
        if c is None:
            c = socket.create_connection(("127.0.0.1", port), timeout=1.0)
        c.sendall(b"ping"); print("ok" if c.recv(64) == b"ping" else "bad", flush=True)
    except OSError:
        print("timeout", flush=True)
        c = None
"""


def test_a_partition_cuts_both_directions_of_an_established_connection_and_heals(tmp_path):
    cgroups = CgroupSet(f"test-{os.getpid()}")
    server = pinger = None
    try:
        server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE,
                                  text=True, preexec_fn=cgroups.join_hook("server"))
        port = int(server.stdout.readline())
        pinger = subprocess.Popen([sys.executable, "-c", PINGER, str(port)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  preexec_fn=cgroups.join_hook("client"))

        def ping() -> str:
            pinger.stdin.write("\n")
            pinger.stdin.flush()
            return pinger.stdout.readline().strip()
        assert ping() == "ok"
        cut = Partition(f"t{os.getpid()}", [Member(cgroups.path("server"), port)],
                        [Member(cgroups.path("client"), 1)])
        cut.apply()
        try:
            assert ping() == "timeout"  # the established connection is cut
            with socket.create_connection(("127.0.0.1", port), timeout=2) as mine:
                mine.sendall(b"ping")  # the test process is on neither side
                assert mine.recv(64) == b"ping"
        finally:
            cut.heal()
        deadline = time.monotonic() + 10
        while ping() != "ok":
            assert time.monotonic() < deadline, "no connection after heal()"
        assert cut.chain not in subprocess.run(["iptables", "-w", "-S"], capture_output=True,
                                               text=True).stdout
    finally:
        for proc in (pinger, server):
            if proc is not None:
                proc.kill()
                proc.wait()
        cgroups.close()
    assert not os.path.exists(os.path.join(cgroups.root, cgroups.base))


def test_rules_cover_every_pair_in_both_directions():
    p = Partition("x", [Member("g/a", 1)], [Member("g/b", 2), Member("g/c", 3)])
    marks = [r for r in p.rules() if "CONNMARK" in r]
    pairs = {(r[r.index("--path") + 1], r[r.index("--dport") + 1]) for r in marks}
    assert pairs == {("g/a", "2"), ("g/a", "3"), ("g/b", "1"), ("g/c", "1")}
    assert p.rules()[-1][-1] == "DROP"
    with pytest.raises(ValueError):
        Partition("x", [], [Member("g/b", 2)])
