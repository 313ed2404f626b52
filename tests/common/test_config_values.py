"""common.config_values: the one parsing of int and bool config values, its syntax and the
messages an operator reads (the key and the value as written, and the rule broken)."""
from __future__ import annotations

import argparse

import pytest

from common.config_values import (ConfigError, arg_bool, arg_int, check_range, parse_bool,
                                  parse_int, prop_bool, prop_int)


@pytest.mark.parametrize("text,value", [("true", True), ("false", False), ("TRUE", True),
                                        ("False", False), ("  true\t", True)])
def test_bools_in_any_case(text, value):
    assert parse_bool("k", text) is value


@pytest.mark.parametrize("text", ["yes", "1", "", "t", "true false", "truex"])
def test_a_bool_typo_is_refused_not_read_as_false(text):
    with pytest.raises(ConfigError) as e:
        parse_bool("aclEnable", text)
    assert str(e.value) == f"aclEnable={text!r}: must be true or false"


@pytest.mark.parametrize("text,value", [("0", 0), ("42", 42), ("-7", -7), ("+5", 5),
                                        (" 12 ", 12), ("007", 7)])
def test_ints_in_java_syntax(text, value):
    assert parse_int("k", text) == value


@pytest.mark.parametrize("text", ["1_000", "0x10", "1.0", "", " ", "4 2", "ten", "--1", "1e3"])
def test_what_java_would_not_parse_is_refused(text):
    with pytest.raises(ConfigError) as e:
        parse_int("maxMessageSize", text)
    assert str(e.value) == f"maxMessageSize={text!r}: must be an integer"


def test_bounds_name_the_key_the_value_and_the_bound():
    assert parse_int("n", "3", 3, 5) == 3 and parse_int("n", "5", 3, 5) == 5
    cases = [("2", 3, 5, "n=2: must be in [3, 5]"), ("6", 3, 5, "n=6: must be in [3, 5]"),
             ("-1", 0, None, "n=-1: must be at least 0"),
             ("11", None, 10, "n=11: must be at most 10")]
    for text, low, high, message in cases:
        with pytest.raises(ConfigError) as e:
            parse_int("n", text, low, high)
        assert str(e.value) == message


def test_check_range_alone():
    check_range("n", 5)  # no bounds: anything
    check_range("n", -(2**70), None, 0)
    with pytest.raises(ConfigError, match=r"^n=1: must be at most 0$"):
        check_range("n", 1, None, 0)


@pytest.mark.parametrize("text,value", [("0x1f", 31), ("0o17", 15), ("0b101", 5),
                                        ("1_000", 1000), ("12", 12)])
def test_prefixed_takes_python_literals(text, value):
    assert parse_int("k", text, prefixed=True) == value


def test_prefixed_still_refuses_what_is_no_integer():
    for text in ("0xg", "1.5", "", "010"):  # a leading zero is no Python literal either
        with pytest.raises(ConfigError, match="must be an integer"):
            parse_int("k", text, prefixed=True)


def test_properties_default_only_when_the_key_is_absent():
    props = {"on": "TRUE", "n": "9", "empty": ""}
    assert prop_bool(props, "on", False) is True
    assert prop_bool(props, "missing", True) is True
    assert prop_int(props, "n", 1) == 9 and prop_int(props, "missing", 4) == 4
    with pytest.raises(ConfigError, match="^empty='': must be an integer$"):
        prop_int(props, "empty", 1)  # present but empty is a mistake, not the default
    with pytest.raises(ConfigError, match="^n=9: must be at most 8$"):
        prop_int(props, "n", 1, maximum=8)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tool", exit_on_error=False)
    p.add_argument("--order", type=arg_bool)
    p.add_argument("--count", type=arg_int(minimum=1))
    p.add_argument("--offset", type=arg_int(minimum=0))
    return p


def test_argparse_types_parse():
    args = _parser().parse_args(["--order", "False", "--count", "3", "--offset", "0x100"])
    assert (args.order, args.count, args.offset) == (False, 3, 256)


@pytest.mark.parametrize("argv,message", [
    (["--order", "yes"], "argument --order: 'yes': must be true or false"),
    (["--count", "abc"], "argument --count: 'abc': must be an integer"),
    (["--count", "0"], "argument --count: 0: must be at least 1"),
    (["--offset", "-1"], "argument --offset: -1: must be at least 0"),
])
def test_argparse_shows_the_option_and_the_rule(argv, message):
    with pytest.raises(argparse.ArgumentError) as e:
        _parser().parse_args(argv)
    assert str(e.value) == message
