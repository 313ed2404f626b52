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

from dataclasses import dataclass

from cluster.consume.handle_mac import mac, verify

PREFIX = "R2"
OLD_PREFIX = "R1"  # CRC-checked handles of earlier versions: forgeable, refused
MAX_LENGTH = 128
_MAX_FIELD_DIGITS = 19  # an i64; longer digit strings are not handles this server issued


class BadReceiptHandle(ValueError):
    pass


@dataclass(frozen=True)
class Receipt:
    queue_id: int
    offset: int
    handle: int


def encode(key: bytes, topic: str, group: str, queue_id: int, offset: int, handle: int) -> str:
    body = f"{PREFIX}:{queue_id}:{offset}:{handle}"
    return f"{body}:{mac(key, body, topic, group)}"


def decode(key: bytes, text: str, topic: str, group: str) -> Receipt:
    if not text:
        raise BadReceiptHandle("the receipt handle is empty")
    if len(text) > MAX_LENGTH:
        raise BadReceiptHandle(f"the receipt handle is {len(text)} characters long, at most "
                               f"{MAX_LENGTH}")
    parts = text.split(":")
    if parts[0] == OLD_PREFIX:
        raise BadReceiptHandle(f"receipt handle {text!r} has the old unauthenticated format "
                               f"(R1); receive the message again to get a current handle")
    if len(parts) != 5 or parts[0] != PREFIX or not all(
            p.isascii() and p.isdigit() and len(p) <= _MAX_FIELD_DIGITS for p in parts[1:4]):
        raise BadReceiptHandle(f"{text!r} is not a receipt handle of this server")
    body = ":".join(parts[:4])
    if not verify(key, parts[4], body, topic, group):
        raise BadReceiptHandle(f"receipt handle {text!r} does not belong to topic {topic} and "
                               f"group {group} (or was altered)")
    return Receipt(int(parts[1]), int(parts[2]), int(parts[3]))
