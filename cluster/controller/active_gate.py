"""Whether this controller may answer as the active one.

A controller on its own (file state) always may: `ALWAYS_ACTIVE`. Controllers sharing their
state in etcd (leadership.py) may only while they hold the leader lease; the others are
standbys that refuse with `NotActiveController`, naming the active one so a node moves to it.
The controller service asks the gate before every answer and tells it when a write was refused
(`step_down`), so a controller that lost its lease stops answering at once.
"""
from __future__ import annotations

from typing import Protocol


class NotActiveController(Exception):
    """This controller is a standby (or just lost its leadership): it must not answer.
    `active_address` is the active controller's advertised address, "" if none is known."""

    def __init__(self, active_address: str, why: str = "") -> None:
        self.active_address = active_address
        self.why = why
        where = (f"the active one is {active_address}" if active_address
                 else "no active controller is known right now")
        super().__init__(f"not the active controller; {where}" + (f" ({why})" if why else ""))


class ActiveGate(Protocol):
    """What the controller service asks before each answer: may this controller answer as
    the active one (the module docstring)."""

    def check_active(self) -> None:
        """Raise NotActiveController unless this controller may answer now."""

    def step_down(self, why: str, active_address: str = "") -> None:
        """A write of the state was refused (another controller, `active_address` if known,
        holds the state): stop being active now; the state is reloaded when this controller
        leads again."""


class _AlwaysActive:
    """The single embedded controller: nobody else can hold the state."""

    def check_active(self) -> None:
        return None

    def step_down(self, why: str, active_address: str = "") -> None:
        return None


ALWAYS_ACTIVE: ActiveGate = _AlwaysActive()
