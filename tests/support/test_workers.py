"""The worker groups of scripts/test's two pytest-xdist workers (tests/support/workers.py): the
rules, and a real two-worker run in which each group's tests stay on one worker."""
from __future__ import annotations

import collections
import os
import re
import subprocess
import sys

from tests.support.workers import LONGEST_FIRST, group_of, rank

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_module_is_a_group_and_compose_and_audit_are_one_each():
    assert group_of("tests/store/test_recovery.py::test_x[a-b]") == "tests/store/test_recovery.py"
    assert group_of("tests/deploy/test_compose.py::test_a") == "compose"
    assert group_of("tests/deploy/test_compose_drills.py::test_b") == "compose"
    assert group_of("tests/audit/test_audit.py::test_c") == group_of(
        "tests/audit/test_cluster_audit_command.py::test_d") == "audit"
    assert group_of("tests/conftest_free.py::test_e") == "tests/conftest_free.py"


def test_the_longest_groups_rank_first_in_their_order():
    ranks = [rank("tests/deploy/test_compose.py::t"), rank("tests/drills/test_drills.py::t"),
             rank("tests/audit/test_audit.py::t"), rank("tests/store/test_recovery.py::t")]
    assert ranks == sorted(ranks) == list(range(len(LONGEST_FIRST) + 1))


def test_two_workers_keep_each_group_on_one_worker(tmp_path):
    """Two modules of many fast tests each on two workers: without the scheduler xdist spreads
    each module's tests over both workers (as it did with xdist_group marks under pytest 9.2)."""
    modules = ["tests/drills/test_checker.py", "tests/drills/test_history.py"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                          "-v", "--basetemp", str(tmp_path / "inner"), *modules], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    workers_of = collections.defaultdict(set)
    for worker, nodeid in re.findall(r"^\[(gw\d)\] \[\s*\d+%\] PASSED (\S+)", out.stdout, re.M):
        workers_of[group_of(nodeid)].add(worker)
    assert set(workers_of) == set(modules), out.stdout
    assert all(len(w) == 1 for w in workers_of.values()), dict(workers_of)
