"""A node's archive settings (broker.conf keys), read with the node's other keys:

    archiveAddress          host:port of the archive server; empty (the default): no archive,
                            retention deletes as before
    archiveShipFrom         SLAVE (default): only while the node is a slave does it ship (and
                            its retention wait for the archive); ANY: any replica, the master
                            too (each shipping node's retention waits for its own shipping)
    archiveShipAheadHours   ship a sealed file this many hours before fileReservedTime expires
                            it (1)
    archiveShipAll          true: ship every commitlog file as soon as it is sealed (false)
    archiveShipIntervalMillis  ms between two looks at what is due (5000)
    archiveBlockBytes       raw bytes per compressed block of a shipped file (1 MiB)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from common.config_values import ConfigError, prop_bool, prop_int

KEYS = frozenset({"archiveAddress", "archiveShipFrom", "archiveShipAheadHours",
                  "archiveShipAll", "archiveShipIntervalMillis", "archiveBlockBytes"})
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
