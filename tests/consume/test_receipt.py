"""Receipt handles: what they encode, that they are bound to their topic and group by a MAC
under the group's key, and that nobody without the key can make one."""
from __future__ import annotations

import hmac
import zlib

import pytest

from cluster.consume import handle_mac, receipt

KEY = b"test-cluster-key"


def test_receipt_handles_are_bound_to_topic_and_group():
    text = receipt.encode(KEY, "T", "G", 3, 42, 7)
    assert receipt.decode(KEY, text, "T", "G") == receipt.Receipt(3, 42, 7)
    for topic, group in (("T2", "G"), ("T", "G2")):
        with pytest.raises(receipt.BadReceiptHandle, match="does not belong"):
            receipt.decode(KEY, text, topic, group)


def test_the_text_layout():
    text = receipt.encode(KEY, "T", "G", 3, 42, 7)
    prefix, queue_id, offset, handle, check = text.split(":")
    assert (prefix, queue_id, offset, handle) == ("R2", "3", "42", "7")
    assert len(check) == 32 and int(check, 16) >= 0


def test_the_check_is_hmac_sha256_of_the_fields_truncated_to_16_bytes():
    """The same bytes as before the keyed-copy form (hmac.digest, one shot): handles issued by
    a node of the previous version stay valid after an upgrade, under either of two keys."""
    for key in (KEY, b"another-key", KEY):
        check = receipt.encode(key, "T", "G", 3, 42, 7).rpartition(":")[2]
        expected = hmac.digest(key, b"R2:3:42:7\x00T\x00G", "sha256")[:16].hex().upper()
        assert check == expected


def test_the_mac_is_hmac_sha256_for_keys_of_any_length():
    """handle_mac builds HMAC from two keyed SHA-256 states: a key shorter than SHA-256's
    64-byte block, exactly one block, and longer (hashed first, as RFC 2104 says) all give
    hmac's bytes, for non-ASCII fields too."""
    fields = ("R2:0:0:0", "Tópic", "gröup")
    message = "\x00".join(fields).encode()
    for key in (b"k", b"k" * 32, b"k" * 64, b"k" * 65, bytes(range(256))):
        assert handle_mac.mac(key, *fields) == \
            hmac.digest(key, message, "sha256")[:16].hex().upper()


def test_a_handle_made_without_the_key_is_refused():
    """Another node key (or a guess) does not make a valid handle: the check is a MAC."""
    forged = receipt.encode(b"another-key", "T", "G", 3, 42, 7)
    with pytest.raises(receipt.BadReceiptHandle):
        receipt.decode(KEY, forged, "T", "G")


def test_old_crc_handles_are_refused_with_a_clear_message():
    body = "R1:3:42:7"
    old = f"{body}:{zlib.crc32(f'{body}:T:G'.encode()) & 0xFFFFFFFF:08X}"
    with pytest.raises(receipt.BadReceiptHandle, match="old unauthenticated format"):
        receipt.decode(KEY, old, "T", "G")


GOOD = receipt.encode(KEY, "T", "G", 3, 42, 7)


@pytest.mark.parametrize("text", [
    "", "R2:" + "9" * 200, GOOD.replace("R2", "R3", 1), GOOD.replace(":42:", ":4x:"),
    ":".join(GOOD.split(":")[:4]), GOOD.replace(":42:", ":43:"),  # no check; altered offset
    GOOD.replace(":42:", ":４２:"), GOOD.replace(":42:", ":" + "9" * 40 + ":"),  # non-ASCII; huge
    GOOD[:-1],
])
def test_malformed_or_altered_handles_are_refused(text):
    with pytest.raises(receipt.BadReceiptHandle):
        receipt.decode(KEY, text, "T", "G")


def test_issued_handles_skip_the_check_for_a_handle_this_node_just_issued(monkeypatch):
    """IssuedHandles remembers what it encoded: acking one of them needs no parse and no MAC
    (the text is this node's, for that topic and group); anything else is checked in full."""
    checked = []
    full_decode = receipt.decode
    monkeypatch.setattr(receipt, "decode", lambda *a: checked.append(a[1]) or full_decode(*a))
    handles = receipt.IssuedHandles(KEY, capacity=2)
    first = handles.encode("T", "G", 3, 42, 7)
    assert first == receipt.encode(KEY, "T", "G", 3, 42, 7)  # the same text as ever
    assert handles.decode(first, "T", "G") == (3, 42, 7) and checked == []
    # used once: a second ack of it (a retry) is checked in full, and still valid
    assert handles.decode(first, "T", "G") == (3, 42, 7) and checked == [first]
    # bound to its topic and group like the MAC: another's is refused, and stays known
    second = handles.encode("T", "G", 0, 1, 8)
    for topic, group in (("Other", "G"), ("T", "Other")):
        with pytest.raises(receipt.BadReceiptHandle):
            handles.decode(second, topic, group)
    checked.clear()
    assert handles.decode(second, "T", "G") == (0, 1, 8) and checked == []
    # bounded: the oldest is dropped, then checked in full when it comes back
    oldest = [handles.encode("T", "G", 0, i, 100 + i) for i in range(3)][0]
    assert handles.decode(oldest, "T", "G") == (0, 0, 100) and checked == [oldest]
    # a forged handle, or one made under another key, is refused as before
    forged = receipt.encode(b"another-key", "T", "G", 0, 2, 102)
    with pytest.raises(receipt.BadReceiptHandle):
        handles.decode(forged, "T", "G")
    with pytest.raises(ValueError):
        receipt.IssuedHandles(KEY, capacity=-1)
