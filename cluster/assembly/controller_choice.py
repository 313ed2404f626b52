"""Which controller a node's heartbeat goes to, without I/O: the one that answered last first,
then the one a refusing standby named as active, then the others in their configured order;
each at most once per round."""
from __future__ import annotations

import re

# A standby's refusal (cluster/controller/active_gate.py NotActiveController).
_ACTIVE = re.compile(r"the active one is (\S+?)(?:\s|$|\))")


def named_active(detail: str) -> str:
    """The active controller's address a standby's refusal names, "" if none."""
    found = _ACTIVE.search(detail)
    return found.group(1) if found else ""


class ControllerChoice:
    """Owns the configured addresses and which one is current. Not thread-safe: the link
    calls it from its own thread (and under its lock where status reads it)."""

    def __init__(self, addresses: list[str]) -> None:
        cleaned = [a.strip() for a in addresses if a.strip()]
        if not cleaned:
            raise ValueError("no controller address")
        self.addresses = list(dict.fromkeys(cleaned))
        self.current = self.addresses[0]
        self._hint = ""  # the active controller a refusal named, tried next in this round
        self._tried: set[str] = set()

    def round(self):
        """The addresses to try for one heartbeat, in order; a refusal's hint jumps the
        queue (among the configured addresses only: a node talks to the controllers it
        was told about)."""
        self._tried = set()
        self._hint = ""
        while True:
            nxt = self._next()
            if nxt is None:
                return
            self._tried.add(nxt)
            yield nxt

    def refused(self, address: str, detail: str) -> None:
        hint = named_active(detail)
        if hint in self.addresses and hint not in self._tried:
            self._hint = hint

    def answered(self, address: str) -> None:
        self.current = address

    def _next(self) -> str | None:
        if self._hint:
            hint, self._hint = self._hint, ""
            return hint
        if self.current not in self._tried:
            return self.current
        start = self.addresses.index(self.current)
        for i in range(1, len(self.addresses)):
            candidate = self.addresses[(start + i) % len(self.addresses)]
            if candidate not in self._tried:
                return candidate
        return None
