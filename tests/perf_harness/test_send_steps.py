"""tests/perf/send_steps.py runs on a small batch and prints a positive figure for every step
(a benchmark nobody runs in CI would rot unseen)."""
from __future__ import annotations

import re

from tests.perf import send_steps


def test_every_step_is_timed(capsys):
    assert send_steps.main(["--batch", "8", "--seconds", "0.05"]) == 0
    rows = re.findall(r"^  (.+?)\s+(\d+\.\d+)$", capsys.readouterr().out, re.M)
    names = [name for name, _ in rows]
    assert names[:3] == ["parse", "read the fields (floor of convert)", "convert"]
    assert "reput (consume queues)" in names and len(rows) == 10
    assert all(float(us) > 0 for _, us in rows)
