"""tests/perf/bare_stream_rtt.py runs against real server processes and prints a round trip for
each of its three client/handler pairs (a benchmark nobody runs in CI would rot unseen)."""
from __future__ import annotations

import re

from tests.perf import bare_stream_rtt


def test_every_pair_is_timed(capsys):
    assert bare_stream_rtt.main(["--count", "20"]) == 0
    rows = re.findall(r"^bare bidi stream round trip, (.+): p50 (\d+\.\d+) ms", capsys.readouterr().out,
                      re.M)
    assert [what for what, _ in rows] == [
        "async handler on the loop", "plain handler, gRPC's thread-pool bridge",
        "async handler on the loop, grpc.aio client"]
    assert all(float(p50) > 0 for _, p50 in rows)
