"""common/text_output.py: sizes, times, tables."""
from __future__ import annotations

import argparse

import pytest

from common.text_output import format_table, human_bytes, iso_ms, parse_size


def test_parse_size():
    assert parse_size("4194304") == 4 * 1024 * 1024
    assert parse_size("4M") == parse_size("4MiB") == parse_size("4mb") == 4 * 1024 * 1024
    assert parse_size("64k") == 65536
    with pytest.raises(Exception):
        parse_size("lots")


def test_parse_size_refuses_zero_and_garbage():
    for text in ("0", "-4K", "4X", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_size(text)
    assert parse_size("1G") == 1 << 30 and parse_size("2_048") == 2048


def test_human_bytes():
    assert human_bytes(0) == "0 B" and human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(5 << 20) == "5.0 MiB"
    assert human_bytes(3 << 40) == "3.0 TiB" and human_bytes(5000 << 40) == "5000.0 TiB"


def test_iso_ms_is_local_time_with_milliseconds():
    assert iso_ms(0) is None and iso_ms(None) is None and iso_ms(-5) is None
    assert iso_ms(10 ** 20) is None
    text = iso_ms(1_700_000_000_123)
    assert text is not None and ".123" in text and text.startswith("2023-11-1")


def test_format_table_aligns_columns():
    lines = format_table(["NAME", "N", "NOTE"], [["a", 1, None], ["longer", 12345, "x"]], right={1})
    assert lines == ["NAME        N  NOTE",
                     "a           1  -",
                     "longer  12345  x"]
    assert format_table(["A", "B"], []) == ["A  B"]
    assert format_table(["A", "B"], [["", ""]]) == ["A  B", ""]  # trailing blanks are cut


def test_format_table_rule_under_the_headers():
    lines = format_table(["drill", "lost"], [["kill-master", 0], ["clean", 12]], right={1},
                         rule=True)
    assert lines == ["drill        lost",
                     "-----------  ----",
                     "kill-master     0",
                     "clean          12"]


def test_format_table_without_headers_and_indented():
    rows = [("node", "n1 (master)"), ("flushed", 1234), ("store", "")]
    assert format_table(None, rows, indent="  ") == ["  node     n1 (master)",
                                                      "  flushed  1234",
                                                      "  store"]
    assert format_table(None, [("a", 1), ("bbb", 22)], right={1}) == ["a     1", "bbb  22"]
    assert format_table(None, []) == []
