"""The one rule of MessagingService request signatures (MQv2-HMAC-SHA1), as the official RocketMQ 5
clients send them, and the caller's signed headers kept for forwarding.

Every call carries metadata
    x-mq-date-time: 20261102T101500Z
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
                    Signature=<hex HMAC-SHA1(secretKey, x-mq-date-time)>
`verify` accepts a call when the access key is known, the signature matches that user's secret
(constant-time compares) and x-mq-date-time is within `window_s` of the node's clock. Only the
date is signed, so the window is what limits a replay of captured headers. The official Python
client (5.1.2) formats its LOCAL time with a "Z" suffix: run it with TZ=UTC, or its requests are
off by the zone's offset (widen aclDateTimeWindowSeconds to cover it if that is not possible).

Forwarding: a slave forwards a client's call with the client's own `authorization` and
x-mq-date-time (`caller_headers`), so its master checks the real user against the same ACL; a
call the node makes on nobody's behalf is signed with the node's accessKey/secretKey (`sign`).
The servicer sets the caller at the start of every call (`set_caller`); the value lives in a
context variable of the handler's thread, which is where forwarding happens.
"""
from __future__ import annotations

import calendar
import contextvars
import hmac
import random
import time
import uuid
from dataclasses import dataclass
from hashlib import sha1
from typing import Callable, Iterable

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_KEY = "x-mq-date-time"
AUTHORIZATION_KEY = "authorization"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
Metadata = Iterable[tuple[str, "str | bytes"]]


def signature(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), sha1).hexdigest()


def parse_authorization(value: str) -> dict[str, str] | None:
    """{"Credential": ..., "SignedHeaders": ..., "Signature": ...} or None if malformed."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        return None
    fields = {}
    for part in rest.split(","):
        name, sep, val = part.strip().partition("=")
        if not sep:
            return None
        fields[name] = val
    return fields


def headers_of(metadata: Metadata | None) -> dict[str, str]:
    out = {}
    for key, value in metadata or ():
        out[key.lower()] = value.decode(errors="replace") if isinstance(value, bytes) else value
    return out


def parse_date_time(text: str) -> int | None:
    """Epoch milliseconds of an x-mq-date-time (read as UTC), None when malformed."""
    try:
        return calendar.timegm(time.strptime(text, DATE_TIME_FORMAT)) * 1000
    except (ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class Verified:
    """The outcome of `verify`: the proven access key, or why nothing is proven."""
    access_key: str = ""
    refusal: str = ""


def verify(metadata: Metadata | None, secret_of: Callable[[str], "str | None"], now_ms: int,
           window_s: int) -> Verified:
    headers = headers_of(metadata)
    raw = headers.get(AUTHORIZATION_KEY)
    if not raw:
        return Verified(refusal=f"missing {AUTHORIZATION_KEY} metadata ({ALGORITHM}); "
                                f"this node requires signed requests")
    fields = parse_authorization(raw)
    if fields is None:
        return Verified(refusal=f"{AUTHORIZATION_KEY} is not {ALGORITHM} Credential=..., "
                                f"SignedHeaders=..., Signature=...")
    access_key = fields.get("Credential", "")
    if fields.get("SignedHeaders", "").lower() != DATE_TIME_KEY:
        return Verified(refusal=f"SignedHeaders must be {DATE_TIME_KEY}")
    date_time = headers.get(DATE_TIME_KEY, "")
    if not date_time:
        return Verified(refusal=f"missing {DATE_TIME_KEY} metadata")
    secret = secret_of(access_key) if access_key else None
    # Compute a signature even for an unknown user, so timing does not tell users apart.
    expected = signature(secret if secret is not None else "\0unknown", date_time)
    good = hmac.compare_digest(fields.get("Signature", "").lower().encode(), expected.encode())
    if secret is None:
        return Verified(refusal=f"unknown access key {access_key!r}")
    if not good:
        return Verified(refusal=f"signature of user {access_key!r} does not match "
                                f"(wrong secret key?)")
    signed_ms = parse_date_time(date_time)
    if signed_ms is None:
        return Verified(refusal=f"{DATE_TIME_KEY} {date_time!r} is not {DATE_TIME_FORMAT}")
    if abs(now_ms - signed_ms) > window_s * 1000:
        return Verified(refusal=f"{DATE_TIME_KEY} {date_time} of user {access_key!r} is "
                                f"{abs(now_ms - signed_ms) / 1000:.0f} s "
                                f"{'behind' if signed_ms < now_ms else 'ahead of'} this node's clock "
                                f"(allowed: {window_s} s, aclDateTimeWindowSeconds; the official "
                                f"Python client writes local time: run it with TZ=UTC)")
    return Verified(access_key=access_key)


def _request_id() -> str:
    """A version-4 UUID from `random` (reseeded after fork), not os.urandom: an id needs no
    secrecy, and urandom gives the GIL up for its system call, which the caller then waits to
    take back from any busy thread (uuid4 270-290 µs a call beside a thread running Python,
    this 2 µs; 2 µs each alone)."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


def sign(access_key: str, secret_key: str, client_id: str = "",
         now_s: float | None = None) -> list[tuple[str, str]]:
    """Metadata of a call signed like the official clients sign theirs (UTC, as they should)."""
    date_time = time.strftime(DATE_TIME_FORMAT, time.gmtime(now_s))
    md = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"),
          (DATE_TIME_KEY, date_time), ("x-mq-request-id", _request_id())]
    if client_id:
        md.append(("x-mq-client-id", client_id))
    if access_key:
        md.append((AUTHORIZATION_KEY, f"{ALGORITHM} Credential={access_key}, "
                                      f"SignedHeaders={DATE_TIME_KEY}, "
                                      f"Signature={signature(secret_key, date_time)}"))
    return md


# -- the caller of the call being served (for forwarding) --------------------------------------
_CALLER: contextvars.ContextVar[tuple[tuple[str, str], ...]] = \
    contextvars.ContextVar("rmqstore_caller_signature", default=())


def set_caller(metadata: Metadata | None) -> None:
    """Called at the start of every served call (and with None at its end): a pool thread
    serves many calls, so each call overwrites what the previous one left."""
    headers = headers_of(metadata)
    if AUTHORIZATION_KEY in headers and DATE_TIME_KEY in headers:
        _CALLER.set(((DATE_TIME_KEY, headers[DATE_TIME_KEY]),
                     (AUTHORIZATION_KEY, headers[AUTHORIZATION_KEY])))
    else:
        _CALLER.set(())


def caller_headers() -> tuple[tuple[str, str], ...]:
    """The signed headers of the call this thread serves, () when none."""
    return _CALLER.get()
