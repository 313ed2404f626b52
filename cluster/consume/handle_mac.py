"""The one MAC of every handle this server gives a client and accepts back (receipt handles,
transaction ids): HMAC-SHA256 keyed by the broker group's shared key, truncated to 16 bytes
(32 uppercase hex digits).

A CRC would only catch typos: anyone can compute it, so a client could forge a handle for
another group's (or topic's) deliveries. With a MAC only a node holding the key can issue a
handle, and the fields it covers (topic, group, ...) bind it to what it was issued for. The key
is the same on every node of the group, so handles stay valid after a failover.
"""
from __future__ import annotations

import functools
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


# RFC 2104's pads, as hmac.py has them
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))
_BLOCK = hashlib.sha256().block_size


@functools.lru_cache(maxsize=16)
def _keyed(key: bytes) -> tuple["hashlib._Hash", "hashlib._Hash"]:
    """HMAC-SHA256's two SHA-256 states with `key` absorbed (RFC 2104: the key XOR ipad for
    the inner hash, XOR opad for the outer): each MAC copies them (never updated themselves,
    so copies from several threads are safe)."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return hashlib.sha256(key.translate(_IPAD)), hashlib.sha256(key.translate(_OPAD))


def mac(key: bytes, *fields: str) -> str:
    """The MAC of `fields` (joined unambiguously) under `key`, as 32 uppercase hex digits."""
    if not key:
        raise ValueError("the handle key is empty")
    # Twice per delivery (made on receive, checked on ack), on the event loop thread. Not the
    # one-shot hmac.digest: it releases the GIL around OpenSSL's HMAC however short the
    # message, so with another thread running Python each call waited for the GIL to come
    # back: 187 us per call instead of 2.3 (docs/performance/history.md, "What the profiles say").
    # Copies of the two keyed SHA-256 states keep the GIL (hashlib releases it only for
    # updates of 2 KiB or more) and give hmac's bytes; they cost 1.0 us a MAC against 1.6
    # through a copy of an hmac.HMAC, whose Python wrapper was most of that.
    inner, outer = _keyed(key)
    h = inner.copy()
    h.update(_SEPARATOR.join(fields).encode())
    o = outer.copy()
    o.update(h.digest())
    return o.digest()[:MAC_HEX_LENGTH // 2].hex().upper()


def verify(key: bytes, check: str, *fields: str) -> bool:
    """True when `check` is the MAC of `fields` (compared in constant time)."""
    if len(check) != MAC_HEX_LENGTH:
        return False
    return hmac.compare_digest(check.upper(), mac(key, *fields))
