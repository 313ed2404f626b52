"""Request signatures (MQv2-HMAC-SHA1) as the official clients send them."""
from __future__ import annotations

from cluster.messaging import request_signature


def test_signatures_like_the_official_clients():
    md = request_signature.sign("ak", "sk")
    assert request_signature.check(md, "ak", "sk") is None
    assert request_signature.check(md, "", "") is None  # not configured: nothing checked
    assert "signature" in request_signature.check(md, "ak", "other")
    intruder = request_signature.sign("intruder", "sk")
    assert "access key" in request_signature.check(intruder, "ak", "sk")
    assert "missing" in request_signature.check([], "ak", "sk")
    date = dict(md)["x-mq-date-time"]
    # what the Python client sends (its signature: hex HMAC-SHA1 of the date with the secret)
    official = [("x-mq-date-time", date), ("authorization",
                f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, "
                f"Signature={request_signature.signature('sk', date)}")]
    assert request_signature.check(official, "ak", "sk") is None
    bearer = [("x-mq-date-time", date), ("authorization", "Bearer x")]
    assert request_signature.check(bearer, "ak", "sk")
