"""Request signatures (MQv2-HMAC-SHA1) as the official clients send them: the one rule in
cluster/security/signature.py (more in tests/security/test_acl_signature.py)."""
from __future__ import annotations

import time

from cluster.security import signature

NOW_S = 1_790_000_000
NOW_MS = NOW_S * 1000
WINDOW = 900


def secrets(ak):
    return {"ak": "sk"}.get(ak)


def verify(md, now_ms=NOW_MS):
    return signature.verify(md, secrets, now_ms, WINDOW)


def test_signatures_like_the_official_clients():
    md = signature.sign("ak", "sk", now_s=NOW_S)
    assert verify(md).access_key == "ak" and not verify(md).refusal
    assert "does not match" in signature.verify(md, {"ak": "other"}.get, NOW_MS, WINDOW).refusal
    intruder = signature.sign("intruder", "sk", now_s=NOW_S)
    assert "unknown access key 'intruder'" in verify(intruder).refusal
    assert "missing" in verify([]).refusal
    date = dict(md)["x-mq-date-time"]
    assert date == time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(NOW_S))
    # what the Python client sends (its signature: hex HMAC-SHA1 of the date with the secret)
    official = [("x-mq-date-time", date), ("authorization",
                f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, "
                f"Signature={signature.signature('sk', date)}")]
    assert verify(official).access_key == "ak"
    bearer = [("x-mq-date-time", date), ("authorization", "Bearer x")]
    assert verify(bearer).refusal


def test_the_date_must_be_within_the_window():
    md = signature.sign("ak", "sk", now_s=NOW_S)
    assert not verify(md, NOW_MS + WINDOW * 1000).refusal
    assert not verify(md, NOW_MS - WINDOW * 1000).refusal
    late = verify(md, NOW_MS + WINDOW * 1000 + 1000).refusal
    assert "aclDateTimeWindowSeconds" in late and "901 s behind" in late
    assert "901 s ahead of" in verify(md, NOW_MS - WINDOW * 1000 - 1000).refusal
    garbled = [("x-mq-date-time", "yesterday"), ("authorization",
               f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, "
               f"Signature={signature.signature('sk', 'yesterday')}")]
    assert "is not %Y%m%dT%H%M%SZ" in verify(garbled).refusal
