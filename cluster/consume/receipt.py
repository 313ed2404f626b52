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
from collections import OrderedDict
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


class IssuedHandles:
    """encode() and decode() under one key, remembering the handles this node issued most
    recently (text -> topic, group, receipt), so that the ack of one skips its parse and MAC
    check (about 2.7 of a consumed message's ~50 us on the node): the text is one this node
    made under this key for that topic and group, which is all the check proves. A handle it
    does not remember (evicted, issued by another node before a failover, forged) is decoded
    and checked as before. Owns the dict, used from the loop and the pool's threads without a
    lock: each of its operations is one C call (OrderedDict), and an interleaving at worst
    turns a hit into a full check or lets the size pass `capacity` by a few. `capacity`
    bounds it (oldest dropped first): about 375 bytes a handle (tracemalloc), 6 MiB at the
    default."""

    def __init__(self, key: bytes, capacity: int = 16384) -> None:
        if capacity < 0:
            raise ValueError(f"capacity {capacity} must be >= 0")
        self.key, self.capacity = key, capacity
        self._issued: OrderedDict[str, tuple[str, str, Receipt]] = OrderedDict()

    def encode(self, topic: str, group: str, queue_id: int, offset: int, handle: int) -> str:
        text = encode(self.key, topic, group, queue_id, offset, handle)
        if self.capacity:
            issued = self._issued
            issued[text] = (topic, group, Receipt(queue_id, offset, handle))
            if len(issued) > self.capacity:
                issued.popitem(last=False)
        return text

    def decode(self, text: str, topic: str, group: str) -> Receipt:
        known = self._issued.pop(text, None)
        if known is not None:
            if known[0] == topic and known[1] == group:
                return known[2]
            self._issued[text] = known  # another topic or group's: refused below, kept
        return decode(self.key, text, topic, group)


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
