"""Request signatures (MQv2-HMAC-SHA1) as the official clients send them: the one rule in
cluster/security/signature.py (a node's answers to bad signatures:
tests/security/test_acl_node.py)."""
from __future__ import annotations

import time

from hypothesis import given, strategies as st

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


@given(secret=st.text(min_size=1, max_size=40), offset_s=st.integers(-900, 900),
       position=st.integers(0, 39), data=st.data())
def test_any_tampering_is_refused(secret, offset_s, position, data):
    """A good signature within the window passes; changing one hex digit of it, or the date it
    signs, or the secret, is refused."""
    md = dict(signature.sign("ak", secret, now_s=NOW_S + offset_s))
    check = {"ak": secret}.get
    assert signature.verify(md.items(), check, NOW_MS, WINDOW).access_key == "ak"
    auth = md["authorization"]
    sig = auth.rpartition("Signature=")[2]
    digit = data.draw(st.sampled_from([c for c in "0123456789abcdef" if c != sig[position]]))
    forged = {**md, "authorization": auth[:len(auth) - 40 + position] + digit +
              auth[len(auth) - 40 + position + 1:]}
    assert "does not match" in signature.verify(forged.items(), check, NOW_MS, WINDOW).refusal
    other_date = {**md, "x-mq-date-time": signature.sign("ak", secret, now_s=NOW_S + offset_s + 1)[2][1]}
    assert signature.verify(other_date.items(), check, NOW_MS, WINDOW).refusal
    assert signature.verify(md.items(), {"ak": secret + "x"}.get, NOW_MS, WINDOW).refusal


def test_every_call_gets_its_own_version_4_request_id():
    import os
    import uuid
    ids = [dict(signature.sign("ak", "sk"))["x-mq-request-id"] for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 4 for i in ids)
    # a forked child draws other ids than its parent (random reseeds after fork)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one id to the parent, then out without running anything else
        os.write(write, dict(signature.sign("ak", "sk"))["x-mq-request-id"].encode())
        os._exit(0)
    os.close(write)
    child_id = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child_id and child_id != dict(signature.sign("ak", "sk"))["x-mq-request-id"]
