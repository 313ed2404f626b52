"""A node's archive settings (broker.conf keys, KEY_DOCS below), read with the node's other
keys."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from common.config_values import ConfigError, KeyDoc, prop_bool, prop_int

# The keys and what each means (ShippingConfig's fields; the docs' configuration reference).
KEY_DOCS = {
    "archiveAddress": KeyDoc("host:port of the archive server; empty: no archive, retention "
                             "deletes as before.", field="address"),
    "archiveShipFrom": KeyDoc("SLAVE: only while the node is a slave does it ship (and its "
                              "retention wait for the archive); ANY: any replica, the master "
                              "too (each shipping node's retention waits for its own "
                              "shipping).", field="ship_from"),
    "archiveShipAheadHours": KeyDoc("Ship a sealed file this long before fileReservedTime "
                                    "expires it.", "hours", field="ahead_hours"),
    "archiveShipAll": KeyDoc("true: ship every commitlog file as soon as it is sealed.",
                             field="ship_all"),
    "archiveShipIntervalMillis": KeyDoc("Time between two looks at what is due.", "ms",
                                        field="interval_ms"),
    "archiveBlockBytes": KeyDoc("Raw bytes per compressed block of a shipped file.", "bytes",
                                field="block_bytes"),
}
KEYS = frozenset(KEY_DOCS)
SHIP_FROM = ("SLAVE", "ANY")


@dataclass(frozen=True)
class ShippingConfig:
    """A node's archive shipping keys (the module docstring), checked at construction;
    shipping is on when `address` is set. Immutable."""

    address: str = ""
    ship_from: str = "SLAVE"
    ahead_hours: int = 1
    ship_all: bool = False
    interval_ms: int = 5000
    block_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.address:
            host, sep, port = self.address.rpartition(":")
            if not host or not sep or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f"archiveAddress={self.address!r}: want host:port")
        if self.ship_from not in SHIP_FROM:
            raise ConfigError(f"archiveShipFrom={self.ship_from!r}: want {' or '.join(SHIP_FROM)}")
        if not 0 <= self.ahead_hours <= 24 * 365:
            raise ConfigError(f"archiveShipAheadHours={self.ahead_hours}: must be 0..8760")
        if not 100 <= self.interval_ms <= 3600_000:
            raise ConfigError(f"archiveShipIntervalMillis={self.interval_ms}: must be "
                              f"100..3600000")
        if not 64 * 1024 <= self.block_bytes <= 16 << 20:
            raise ConfigError(f"archiveBlockBytes={self.block_bytes}: must be 65536..16777216")

    @property
    def enabled(self) -> bool:
        return bool(self.address)


def shipping_config_from_properties(props: Mapping[str, str]) -> ShippingConfig:
    return ShippingConfig(address=props.get("archiveAddress", "").strip(),
                          ship_from=props.get("archiveShipFrom", "SLAVE").strip().upper(),
                          ahead_hours=prop_int(props, "archiveShipAheadHours", 1),
                          ship_all=prop_bool(props, "archiveShipAll", False),
                          interval_ms=prop_int(props, "archiveShipIntervalMillis", 5000),
                          block_bytes=prop_int(props, "archiveBlockBytes", 1 << 20))
