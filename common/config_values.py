"""Configuration values from text: the error every config module raises, and the parsing of the
int and bool values of properties files (broker.conf style: `key=value`, as RocketMQ reads them).

One place for the wording, so an operator reads the same message whichever file is wrong:
`key='value': must be true or false`, `key='value': must be an integer`, with the bound when
there is one.
"""
from __future__ import annotations

from typing import Mapping


class ConfigError(ValueError):
    """A configuration value or key is invalid or unknown. The message names the key."""


def parse_bool(key: str, text: str) -> bool:
    """`true` or `false` (any case, surrounding blanks ignored)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key}={text!r}: must be true or false")
    return value == "true"


def parse_int(key: str, text: str, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """A decimal integer, within [minimum, maximum] where given."""
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"{key}={text!r}: must be an integer") from None
    check_range(key, value, minimum, maximum)
    return value


def check_range(key: str, value: int, minimum: int | None = None,
                maximum: int | None = None) -> None:
    """Refuses `value` outside [minimum, maximum] (either bound may be open)."""
    if minimum is not None and value < minimum:
        if maximum is None:
            raise ConfigError(f"{key}={value}: must be at least {minimum}")
        raise ConfigError(f"{key}={value}: must be in [{minimum}, {maximum}]")
    if maximum is not None and value > maximum:
        if minimum is None:
            raise ConfigError(f"{key}={value}: must be at most {maximum}")
        raise ConfigError(f"{key}={value}: must be in [{minimum}, {maximum}]")


def prop_bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    """The bool under `key` in a properties mapping, `default` when absent."""
    text = props.get(key)
    return default if text is None else parse_bool(key, text)


def prop_int(props: Mapping[str, str], key: str, default: int, minimum: int | None = None,
             maximum: int | None = None) -> int:
    """The int under `key` in a properties mapping, `default` when absent."""
    text = props.get(key)
    return default if text is None else parse_int(key, text, minimum, maximum)
