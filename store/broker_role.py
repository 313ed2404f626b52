"""The three broker roles, under RocketMQ's names (broker.conf `brokerRole`).

    ASYNC_MASTER  appends; a put is acknowledged after the flush policy
    SYNC_MASTER   appends; a put is acknowledged once the required in-sync slaves acked it
    SLAVE         copies its master's commitlog; serves reads, appends nothing of its own

A StrEnum, so a role compares equal to its broker.conf spelling and prints as it.
"""
from __future__ import annotations

import enum


class BrokerRole(enum.StrEnum):
    """A node's broker role under its broker.conf spelling (the module docstring)."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE

    @classmethod
    def parse(cls, text: str) -> "BrokerRole":
        """The role named `text` (exact, upper case); ValueError names the choices."""
        try:
            return cls(text)
        except ValueError:
            raise ValueError(f"unknown broker role {text!r} (want one of "
                             f"{', '.join(r.value for r in cls)})") from None
