"""Receipt handles: what a consumer gets with each delivery and hands back to ack it or to
change its invisibility.

Text layout (ASCII, fields separated by ':'):

    R1 : queue id : queue offset : handle : check
         decimal    decimal        decimal  8 hex digits, CRC-32 of "R1:queue:offset:handle:topic:group"

`handle` is the delivery's unique number (consumer state's `next_handle`); the state knows which
handle is current for each in-flight offset, so a handle from an earlier delivery (expired and
redelivered, or already acked) is refused. The check binds the handle to its topic and group:
a handle used with another topic or group, or mistyped, is INVALID_RECEIPT_HANDLE.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

PREFIX = "R1"
MAX_LENGTH = 128


class BadReceiptHandle(ValueError):
    pass


@dataclass(frozen=True)
class Receipt:
    queue_id: int
    offset: int
    handle: int


def _check(body: str, topic: str, group: str) -> str:
    return f"{zlib.crc32(f'{body}:{topic}:{group}'.encode()) & 0xFFFFFFFF:08X}"


def encode(topic: str, group: str, queue_id: int, offset: int, handle: int) -> str:
    body = f"{PREFIX}:{queue_id}:{offset}:{handle}"
    return f"{body}:{_check(body, topic, group)}"


def decode(text: str, topic: str, group: str) -> Receipt:
    if not text:
        raise BadReceiptHandle("the receipt handle is empty")
    if len(text) > MAX_LENGTH:
        raise BadReceiptHandle(f"the receipt handle is {len(text)} characters long")
    parts = text.split(":")
    if len(parts) != 5 or parts[0] != PREFIX:
        raise BadReceiptHandle(f"{text!r} is not a receipt handle of this server")
    if not all(p.isdigit() for p in parts[1:4]):
        raise BadReceiptHandle(f"{text!r} is not a receipt handle of this server")
    body = ":".join(parts[:4])
    if parts[4] != _check(body, topic, group):
        raise BadReceiptHandle(f"receipt handle {text!r} does not belong to topic {topic} and "
                               f"group {group} (or was altered)")
    return Receipt(int(parts[1]), int(parts[2]), int(parts[3]))
