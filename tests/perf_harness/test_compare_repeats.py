"""tests/perf/compare.py's repeat policy: a failed repeat costs its own figures only; a system
is given up when a server process died or two repeats in a row failed."""
from __future__ import annotations

import subprocess
import sys

from tests.perf import compare
from tests.perf.compare_report import Results, SystemInfo
from tests.perf.compare_systems import Running


class FailingRuns(compare.Runner):
    """The real Runner's bookkeeping with the workloads replaced by a script of outcomes (the
    policy under test does not depend on what a workload does)."""

    def __init__(self, results: Results, fail: set[int], on_fail=lambda: None) -> None:
        super().__init__(pool=None, plan=None, results=results)
        self.fail, self.on_fail, self.ran = fail, on_fail, []

    def repeat(self, run: Running, rep: int) -> None:
        self.ran.append(rep)
        if rep in self.fail:
            self.on_fail()
            raise TimeoutError(f"client timed out in repeat {rep}")
        self.results.add(run.key, "produce_x1", 1000.0 + rep)


def results() -> Results:
    return Results(systems=[SystemInfo("nats-r3", "NATS R3", "not fsynced")])


def test_one_failed_repeat_costs_only_its_own_figures(tmp_path):
    r = results()
    runner = FailingRuns(r, fail={1})
    compare._repeats(runner, Running("nats-r3", str(tmp_path)), r, 3)
    assert runner.ran == [0, 1, 2]
    assert r.values["nats-r3"]["produce_x1"] == [1000.0, 1002.0]
    assert any("repeat 1: failed" in n and "timed out" in n for n in r.notes)
    assert not any("given up" in n for n in r.notes)


def test_two_failed_repeats_in_a_row_give_the_system_up(tmp_path):
    r = results()
    runner = FailingRuns(r, fail={0, 1})
    compare._repeats(runner, Running("nats-r3", str(tmp_path)), r, 4)
    assert runner.ran == [0, 1]
    assert "nats-r3: given up after repeat 1" in r.notes


def test_a_dead_server_process_gives_the_system_up_at_once(tmp_path):
    run = Running("nats-r3", str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    run._procs.append(proc)
    run.pids["nats0"] = proc.pid
    assert run.alive()

    def server_dies() -> None:
        proc.kill()
        proc.wait(10)

    r = results()
    runner = FailingRuns(r, fail={0}, on_fail=server_dies)
    try:
        compare._repeats(runner, run, r, 3)
    finally:
        run.stop()
    assert runner.ran == [0] and not run.alive()
    assert "nats-r3: given up after repeat 0" in r.notes
