"""The record of one drill run: every send with its outcome, every receive, every ack and the
faults, with their monotonic times. The workload's threads write it, the checker reads it, and
it saves to / loads from JSON lines so a failed run can be checked again offline.

Also owns the workload's message body format (`body_for` / `key_of`): the key travels in the
body, so a receive can be matched to its send without trusting any server-side property.
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any


class SendOutcome(str, Enum):
    """OK: the server acknowledged (stored per its durability promise). FAILED: the server
    answered that nothing was stored. UNKNOWN: no answer (deadline, connection lost) or
    stored-but-not-durable."""
    OK = "ok"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Send:
    key: str                    # unique per message the workload sends
    topic: str
    message_group: str | None   # FIFO message group, None for a normal message
    seq: int                    # position in its message group (FIFO) or producer stream, from 0
    started: float              # time.monotonic() seconds
    finished: float
    outcome: SendOutcome
    detail: str = ""            # status name / exception text
    message_id: str = ""
    client: str = "own"         # who sent it: "own" (cluster/client) or "official"
    # Several broker groups: the group (broker name) that stored it (OK) or that gave the last
    # answer (not OK); "" when not known (one group, or an official client's failed send).
    group: str = ""
    refused_by: str = ""        # groups that refused it before, comma-separated (own client)

    def refused_groups(self) -> tuple[str, ...]:
        return tuple(g for g in self.refused_by.split(",") if g)


@dataclass(frozen=True)
class Receive:
    key: str | None             # None: a body that is not one of the workload's (foreign)
    topic: str
    group: str                  # consumer group
    queue_id: int
    queue_offset: int
    message_id: str
    delivery_attempt: int
    at: float                   # monotonic
    broker: str = ""            # the broker group that delivered it ("": not known)


@dataclass(frozen=True)
class Ack:
    key: str
    group: str
    message_id: str
    ok: bool
    at: float
    detail: str = ""


@dataclass(frozen=True)
class Fault:
    name: str                   # e.g. "kill -9 master (pid 123)"
    started: float
    healed: float | None = None  # when the drill undid it; None if never


Record = Send | Receive | Ack | Fault
_TYPE_OF: dict[type, str] = {Send: "send", Receive: "receive", Ack: "ack", Fault: "fault"}
_CLASS_OF: dict[str, type] = {name: cls for cls, name in _TYPE_OF.items()}


class History:
    """Thread-safe record of one drill run (one lock guards the four lists)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sends: list[Send] = []
        self._receives: list[Receive] = []
        self._acks: list[Ack] = []
        self._faults: list[Fault] = []

    def record_send(self, send: Send) -> None:
        with self._lock:
            self._sends.append(send)

    def record_receive(self, receive: Receive) -> None:
        with self._lock:
            self._receives.append(receive)

    def record_ack(self, ack: Ack) -> None:
        with self._lock:
            self._acks.append(ack)

    def fault_started(self, name: str, at: float | None = None) -> int:
        """Records a fault; returns its index for `fault_healed`."""
        fault = Fault(name, time.monotonic() if at is None else at)
        with self._lock:
            self._faults.append(fault)
            return len(self._faults) - 1

    def fault_healed(self, index: int, at: float | None = None) -> None:
        healed = time.monotonic() if at is None else at
        with self._lock:
            # Fault is frozen (snapshots handed out must not change under the reader): replace it.
            self._faults[index] = dataclasses.replace(self._faults[index], healed=healed)

    def sends(self) -> list[Send]:
        with self._lock:
            return list(self._sends)

    def receives(self) -> list[Receive]:
        with self._lock:
            return list(self._receives)

    def receive_count(self) -> int:
        """How many receives so far, without copying them (the drain polls it)."""
        with self._lock:
            return len(self._receives)

    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._acks)

    def faults(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def save(self, path: str) -> None:
        """JSON lines, one {"type": "send"|"receive"|"ack"|"fault", ...fields} per record."""
        with self._lock:
            records: list[Record] = [*self._faults, *self._sends, *self._receives, *self._acks]
        with open(path, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(_to_json(record), sort_keys=False) + "\n")

    @classmethod
    def load(cls, path: str) -> History:
        """Inverse of `save`; a bad line raises ValueError naming the line number."""
        history = cls()
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = _from_json(json.loads(line))
                except (ValueError, TypeError, KeyError) as e:
                    raise ValueError(f"{path} line {number}: {e}") from e
                history._add(record)
        return history

    def _add(self, record: Record) -> None:
        lists: dict[type, list[Any]] = {Send: self._sends, Receive: self._receives,
                                         Ack: self._acks, Fault: self._faults}
        with self._lock:
            lists[type(record)].append(record)


def _to_json(record: Record) -> dict[str, Any]:
    fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if isinstance(record, Send):
        fields["outcome"] = record.outcome.value
    return {"type": _TYPE_OF[type(record)], **fields}


def _from_json(obj: Any) -> Record:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("type")
    if kind not in _CLASS_OF:
        raise ValueError(f"unknown record type {kind!r}")
    cls = _CLASS_OF[kind]
    fields = {k: v for k, v in obj.items() if k != "type"}
    if cls is Send and "outcome" in fields:
        fields["outcome"] = SendOutcome(fields["outcome"])   # ValueError on an unknown outcome
    record = cls(**fields)                                    # TypeError on missing/extra fields
    _check_types(record)
    return record


def _check_types(record: Record) -> None:
    """Rejects a field whose JSON value has the wrong type, so a damaged file fails at load with
    its line number rather than later inside the checker."""
    hints = typing.get_type_hints(type(record))
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        allowed = typing.get_args(hints[f.name]) or (hints[f.name],)
        if not any(_has_type(value, t) for t in allowed):
            raise ValueError(f"{type(record).__name__}.{f.name}: bad value {value!r}")


def _has_type(value: Any, t: Any) -> bool:
    if t is type(None):
        return value is None
    if isinstance(value, bool):          # bool is an int to Python, never a time or an offset
        return t is bool
    if t is float:                       # JSON writes a whole float like 2.0 but may hold 2
        return isinstance(value, (int, float))
    return isinstance(value, t)


_BODY_PREFIX = b"drill:"
_BODY_END = b"|"
_PAD = b"."


def body_for(key: str, size: int) -> bytes:
    """The workload's message body: b"drill:" + key + b"|" padded with b"." to `size` bytes."""
    if _BODY_END.decode() in key:
        raise ValueError(f"a drill key may not contain {_BODY_END!r}: {key!r}")
    header = _BODY_PREFIX + key.encode("utf-8") + _BODY_END
    if size < len(header):
        raise ValueError(f"body size {size} is shorter than its header ({len(header)} bytes)")
    return header + _PAD * (size - len(header))


def key_of(body: bytes) -> str | None:
    """The key of a `body_for` body; None for anything not in that form (a foreign message)."""
    if not body.startswith(_BODY_PREFIX):
        return None
    end = body.find(_BODY_END, len(_BODY_PREFIX))
    if end < 0 or body[end + 1:].strip(_PAD):
        return None
    try:
        return body[len(_BODY_PREFIX):end].decode("utf-8")
    except UnicodeDecodeError:
        return None
