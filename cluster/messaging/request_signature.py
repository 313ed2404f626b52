"""Optional request authentication of the MessagingService (node keys accessKey / secretKey).

The official RocketMQ 5 clients sign every call with metadata
    x-mq-date-time: 20261102T101500Z
    authorization:  MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
                    Signature=<hex HMAC-SHA1(secretKey, x-mq-date-time)>
A node with both keys set refuses calls whose credential or signature does not match
(UNAUTHORIZED). The date is not compared with the clock: the Python client formats its LOCAL
time with a "Z" suffix, so a freshness check would refuse every client outside UTC. Without the
keys nothing is checked (an empty Credential is what clients send then).
"""
from __future__ import annotations

import hmac
import time
import uuid
from hashlib import sha1
from typing import Iterable

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_KEY = "x-mq-date-time"


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


def check(metadata: Iterable[tuple[str, str | bytes]], access_key: str, secret_key: str) -> str | None:
    """None when the call may proceed, else why it may not."""
    if not access_key:
        return None
    headers = {}
    for key, value in metadata or ():
        headers[key.lower()] = value.decode() if isinstance(value, bytes) else value
    raw = headers.get("authorization")
    if not raw:
        return "missing authorization metadata (MQv2-HMAC-SHA1)"
    fields = parse_authorization(raw)
    if fields is None:
        return f"authorization is not {ALGORITHM} Credential=..., SignedHeaders=..., Signature=..."
    if not hmac.compare_digest(fields.get("Credential", "").encode(), access_key.encode()):
        return "unknown access key"
    if fields.get("SignedHeaders", "").lower() != DATE_TIME_KEY:
        return f"SignedHeaders must be {DATE_TIME_KEY}"
    date_time = headers.get(DATE_TIME_KEY, "")
    if not date_time:
        return f"missing {DATE_TIME_KEY} metadata"
    expected = signature(secret_key, date_time)
    if not hmac.compare_digest(fields.get("Signature", "").lower().encode(), expected.encode()):
        return "signature does not match"
    return None


def sign(access_key: str, secret_key: str, client_id: str = "") -> list[tuple[str, str]]:
    """Metadata of a call signed like the official clients sign theirs (for forwarding)."""
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    md = [("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"),
          (DATE_TIME_KEY, date_time), ("x-mq-request-id", str(uuid.uuid4()))]
    if client_id:
        md.append(("x-mq-client-id", client_id))
    if access_key:
        md.append(("authorization", f"{ALGORITHM} Credential={access_key}, "
                                    f"SignedHeaders={DATE_TIME_KEY}, "
                                    f"Signature={signature(secret_key, date_time)}"))
    return md
