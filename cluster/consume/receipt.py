"""Receipt handles: what a consumer gets with each delivery and hands back to ack it or to
change its invisibility.

Text layout (ASCII, fields separated by ':'):

    R2 : queue id : queue offset : handle : check
         decimal    decimal        decimal  32 hex digits, handle_mac.mac(key, "R2:queue:offset:
                                            handle", topic, group)

`handle` is the delivery's unique number (consumer state's `next_handle`); the state knows which
handle is current for each in-flight offset, so a handle from an earlier delivery (expired and
redelivered, or already acked) is refused. The check is an HMAC keyed by the broker group's
shared key (handle_mac.py): it binds the handle to its topic and group, and nobody without the
key can make one, so a client cannot forge a handle to ack or hide another group's messages.
A handle used with another topic or group, altered, or of the old CRC format ("R1", before the
MAC) is INVALID_RECEIPT_HANDLE.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from cluster.consume.handle_mac import mac, verify

PREFIX = "R2"
OLD_PREFIX = "R1"  # CRC-checked handles of earlier versions: forgeable, refused
MAX_LENGTH = 128
# One match checks the whole layout (an ack decodes a handle per entry). Fields of at most 19
# digits (an i64; longer digit strings are not handles this server issued).
_HANDLE = re.compile(PREFIX + r":(\d{1,19}):(\d{1,19}):(\d{1,19}):([0-9A-Fa-f]{32})", re.ASCII)


class BadReceiptHandle(ValueError):
    pass


class Receipt(NamedTuple):
    queue_id: int
    offset: int
    handle: int


def encode(key: bytes, topic: str, group: str, queue_id: int, offset: int, handle: int) -> str:
    body = f"{PREFIX}:{queue_id}:{offset}:{handle}"
    return f"{body}:{mac(key, body, topic, group)}"


def decode(key: bytes, text: str, topic: str, group: str) -> Receipt:
    match = _HANDLE.fullmatch(text) if len(text) <= MAX_LENGTH else None
    if match is None:
        raise BadReceiptHandle(_malformed(text))
    body = text[:match.start(4) - 1]
    if not verify(key, match[4], body, topic, group):
        raise BadReceiptHandle(f"receipt handle {text!r} does not belong to topic {topic} and "
                               f"group {group} (or was altered)")
    return Receipt(int(match[1]), int(match[2]), int(match[3]))


def _malformed(text: str) -> str:
    """Why `text` is not a receipt handle of this server."""
    if not text:
        return "the receipt handle is empty"
    if len(text) > MAX_LENGTH:
        return f"the receipt handle is {len(text)} characters long, at most {MAX_LENGTH}"
    if text.split(":")[0] == OLD_PREFIX:
        return (f"receipt handle {text!r} has the old unauthenticated format (R1); receive the "
                f"message again to get a current handle")
    return f"{text!r} is not a receipt handle of this server"
