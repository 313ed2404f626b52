"""Times on the command line (--begin, --end, --time): epoch milliseconds, ISO 8601, `now`, or
a duration ago."""
from __future__ import annotations

import argparse
from datetime import datetime, timezone

import pytest

from cluster.cli.timeparse import parse_time_ms

NOW = 1_700_000_000_000


@pytest.mark.parametrize("text, expected", [
    ("now", NOW), (" now ", NOW), ("1699999999000", 1_699_999_999_000), ("0", 0),
    ("500ms", NOW - 500), ("30s", NOW - 30_000), ("10m", NOW - 600_000),
    ("2h", NOW - 7_200_000), ("1d", NOW - 86_400_000), ("-10m", NOW - 600_000),
    ("2024-05-01T10:00:00+00:00", int(datetime(2024, 5, 1, 10, tzinfo=timezone.utc).timestamp() * 1000)),
])
def test_accepted_forms(text, expected):
    assert parse_time_ms(text, now_ms=NOW) == expected


def test_a_naive_iso_time_is_local_time():
    assert parse_time_ms("2024-05-01T10:00:00", now_ms=NOW) == \
        int(datetime(2024, 5, 1, 10).timestamp() * 1000)


@pytest.mark.parametrize("text", ["", "yesterday", "10 m", "10w", "1.5h", "-5"])
def test_anything_else_is_an_argparse_error(text):
    with pytest.raises(argparse.ArgumentTypeError, match="want epoch milliseconds"):
        parse_time_ms(text, now_ms=NOW)
