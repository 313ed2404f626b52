"""Which tests share a pytest-xdist worker (scripts/test runs the suite on two).

Most of the suite's time is spent waiting on real processes, elections, leases and containers,
not on the CPU, so two workers take about half the time of one. A group's tests run on one
worker, in order: by default a module's (its module fixtures are set up once); all compose
tests (they publish the same host ports and write deploy/secrets); all audit tests (one
SparkSession and one replicated run for the session). The longest groups go first, so that no
worker is left alone with one of them at the end.

xdist's own `xdist_group` mark is not used: its worker writes the group into the test's id,
which pytest 9.2 no longer lets it change (every test became a group of its own); the groups
are given to xdist's scope scheduler instead (`scheduler`, from tests/conftest.py).
"""
from __future__ import annotations

SHARED_GROUPS = {"deploy": "compose", "audit": "audit"}  # tests/<package>/ -> its group
LONGEST_FIRST = ("compose", "tests/drills/test_drills.py", "audit")


def group_of(nodeid: str) -> str:
    """The group of a test id ("tests/<package>/<module>.py::<test>")."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return SHARED_GROUPS.get(parts[1], path) if len(parts) > 2 else path


def rank(nodeid: str) -> int:
    """Where a test's group starts: the longest first, then the rest in collection order."""
    group = group_of(nodeid)
    return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)


def scheduler(config, log):
    """xdist's scope scheduling by `group_of`, in collection order (xdist would otherwise
    reorder the groups by their number of tests)."""
    from xdist.scheduler import LoadScopeScheduling  # only where xdist runs the suite

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False
    return GroupScheduling(config, log)
