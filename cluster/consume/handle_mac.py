"""The one MAC of every handle this server gives a client and accepts back (receipt handles,
transaction ids): HMAC-SHA256 keyed by the broker group's shared key, truncated to 16 bytes
(32 uppercase hex digits).

A CRC would only catch typos: anyone can compute it, so a client could forge a handle for
another group's (or topic's) deliveries. With a MAC only a node holding the key can issue a
handle, and the fields it covers (topic, group, ...) bind it to what it was issued for. The key
is the same on every node of the group, so handles stay valid after a failover.
"""
from __future__ import annotations

import hashlib
import hmac

MAC_HEX_LENGTH = 32  # 16 bytes
_SEPARATOR = "\x00"  # cannot occur in topics, groups or the numeric fields (no ambiguity)


def handle_key(secret: bytes) -> bytes:
    """The key of handles derived from the group's shared secret (the cluster secret, which
    also proves membership): a key of their own, so a MAC of one use never serves the other."""
    if not secret:
        raise ValueError("the secret is empty")
    return hmac.new(secret, b"rmqstore client handles v1", hashlib.sha256).digest()


def mac(key: bytes, *fields: str) -> str:
    """The MAC of `fields` (joined unambiguously) under `key`, as 32 uppercase hex digits."""
    if not key:
        raise ValueError("the handle key is empty")
    # the one-shot form: OpenSSL's HMAC without building an hmac object (twice per delivery:
    # its handle is made on receive and checked on ack)
    digest = hmac.digest(key, _SEPARATOR.join(fields).encode(), "sha256")
    return digest[:MAC_HEX_LENGTH // 2].hex().upper()


def verify(key: bytes, check: str, *fields: str) -> bool:
    """True when `check` is the MAC of `fields` (compared in constant time)."""
    if len(check) != MAC_HEX_LENGTH:
        return False
    return hmac.compare_digest(check.upper(), mac(key, *fields))
