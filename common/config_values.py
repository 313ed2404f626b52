"""Configuration values from text: the error every config module raises, and the parsing of the
int and bool values of properties files (broker.conf style: `key=value`, as RocketMQ reads them)
and of command-line options.

One place for the wording, so an operator reads the same message whichever file is wrong:
`key='value': must be true or false`, `key='value': must be an integer`, with the bound when
there is one (`key=value: must be at least N`). As an argparse type the message has no key
(argparse names the option: `argument --count: 'x': must be an integer`).
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Callable, Mapping, TypeVar

T = TypeVar("T")

# Java's Integer.parseInt syntax (broker.conf is RocketMQ's file): an optional sign and digits.
# Python's int() would also take "1_000" and inner blanks, which RocketMQ refuses.
_INT = re.compile(r"[+-]?\d+")


class ConfigError(ValueError):
    """A configuration value or key is invalid or unknown. The message names the key."""


@dataclass(frozen=True)
class KeyDoc:
    """What one configuration key means, written next to the table that parses it (each config
    module's KEY_DOCS) and rendered into the configuration reference of the documentation
    site (cluster/reference/config_reference.py), which takes the type and the default from the
    parsed config. `text`: what it does; `unit`: of a number ("ms", "bytes", ...; "" when
    none); `field`: the attribute of the module's config object that holds the value, dotted
    for a nested one ("" where the module derives it from the key, as StoreConfig does)."""
    text: str
    unit: str = ""
    field: str = ""


def _refusal(key: str, shown: str, reason: str) -> ConfigError:
    return ConfigError(f"{key}={shown}: {reason}" if key else f"{shown}: {reason}")


def parse_bool(key: str, text: str) -> bool:
    """`true` or `false` (any case, surrounding blanks ignored). Stricter than Java's
    Boolean.parseBoolean, which reads any typo as false."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise _refusal(key, repr(text), "must be true or false")
    return value == "true"


def parse_int(key: str, text: str, minimum: int | None = None, maximum: int | None = None,
              *, prefixed: bool = False) -> int:
    """A decimal integer as Java's Integer.parseInt reads it (surrounding blanks ignored),
    within [minimum, maximum] where given. `prefixed`: Python's integer literals instead
    (0x1f, 0o17, 0b101, 1_000), for command-line offsets that are often written in hex."""
    stripped = text.strip()
    try:
        if prefixed:
            value = int(stripped, 0)
        elif _INT.fullmatch(stripped):
            value = int(stripped)
        else:
            raise ValueError(text)
    except ValueError:
        raise _refusal(key, repr(text), "must be an integer") from None
    check_range(key, value, minimum, maximum)
    return value


def check_range(key: str, value: int, minimum: int | None = None,
                maximum: int | None = None) -> None:
    """Refuses `value` outside [minimum, maximum] (either bound may be open)."""
    below = minimum is not None and value < minimum
    above = maximum is not None and value > maximum
    if not (below or above):
        return
    if maximum is None:
        reason = f"must be at least {minimum}"
    elif minimum is None:
        reason = f"must be at most {maximum}"
    else:
        reason = f"must be in [{minimum}, {maximum}]"
    raise _refusal(key, str(value), reason)


def prop_bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    """The bool under `key` in a properties mapping, `default` when absent."""
    text = props.get(key)
    return default if text is None else parse_bool(key, text)


def prop_int(props: Mapping[str, str], key: str, default: int, minimum: int | None = None,
             maximum: int | None = None) -> int:
    """The int under `key` in a properties mapping, `default` when absent."""
    text = props.get(key)
    return default if text is None else parse_int(key, text, minimum, maximum)


def _option(parse: Callable[..., T], text: str, *args: object, **kwargs: object) -> T:
    """`parse` without a key, for an argparse type: argparse shows an ArgumentTypeError's
    message after the option's name, but replaces a ValueError's (ConfigError is one) by
    "invalid value"."""
    try:
        return parse("", text, *args, **kwargs)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def arg_bool(text: str) -> bool:
    """An argparse type: parse_bool's rule."""
    return _option(parse_bool, text)


def arg_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in Python's literal syntax (0x1f too) within the bounds."""
    def integer(text: str) -> int:
        return _option(parse_int, text, minimum, maximum, prefixed=True)
    return integer
