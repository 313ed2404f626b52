"""The membership rules in memory (cluster/security/member_proof.py): a proof admits exactly
the challenge it answers, once, for the method and node id it names, and only with the secret."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from cluster.security import member_proof as mp
from cluster.security.member_proof import ChallengeBook, MembershipRefused, PresentedProof
from common.clock import ManualClock

SECRET = b"the-cluster-secret-0123"
NODE = "broker-a:1"
PURPOSE = mp.REPLICATION_STREAM


def answered(book: ChallengeBook, secret: bytes = SECRET, node: str = NODE,
             purpose: str = PURPOSE) -> PresentedProof:
    """What an honest peer with `secret` presents after asking `book` for a challenge."""
    client_nonce = mp.new_client_nonce()
    server_nonce, server_proof = book.issue(purpose, node, client_nonce)
    header = mp.client_header(secret, purpose, node, client_nonce, server_nonce)
    return mp.parse_header(header[1])


def test_a_member_is_admitted_once_and_the_server_proves_itself():
    book = ChallengeBook(SECRET, ManualClock())
    cn = mp.new_client_nonce()
    sn, server_proof = book.issue(PURPOSE, NODE, cn)
    mp.check_server_proof(SECRET, PURPOSE, NODE, cn, sn, server_proof)  # a member server
    with pytest.raises(MembershipRefused, match="does not know the cluster secret"):
        mp.check_server_proof(b"another-secret-0123456", PURPOSE, NODE, cn, sn, server_proof)
    presented = mp.parse_header(mp.client_header(SECRET, PURPOSE, NODE, cn, sn)[1])
    assert book.admit(PURPOSE, presented) == NODE
    with pytest.raises(MembershipRefused, match="already used"):  # a replay
        book.admit(PURPOSE, presented)
    assert len(book) == 0


def test_a_wrong_secret_is_refused_and_burns_the_nonce():
    book = ChallengeBook(SECRET, ManualClock())
    wrong = answered(book, secret=b"not-the-secret-0123456")
    with pytest.raises(MembershipRefused, match="wrong cluster secret"):
        book.admit(PURPOSE, wrong)
    # the right proof for the same nonce no longer helps: no guessing on one challenge
    right = mp.parse_header(mp.client_header(SECRET, PURPOSE, NODE, wrong.client_nonce,
                                             wrong.server_nonce)[1])
    with pytest.raises(MembershipRefused, match="already used"):
        book.admit(PURPOSE, right)


def test_a_proof_is_for_one_method_and_expires():
    clock = ManualClock()
    book = ChallengeBook(SECRET, clock)
    heartbeat_proof = answered(book, purpose=mp.CONTROLLER_HEARTBEAT)
    with pytest.raises(MembershipRefused, match="issued for"):
        book.admit(PURPOSE, heartbeat_proof)
    late = answered(book)
    clock.advance(mp.NONCE_TTL_S + 0.001)
    with pytest.raises(MembershipRefused, match="expired"):
        book.admit(PURPOSE, late)


def test_the_book_is_bounded_and_drops_the_oldest():
    book = ChallengeBook(SECRET, ManualClock(), max_outstanding=3)
    first = answered(book)
    for _ in range(3):
        answered(book)
    assert len(book) == 3
    with pytest.raises(MembershipRefused, match="unknown"):
        book.admit(PURPOSE, first)


@pytest.mark.parametrize("value, reason", [
    (None, "no membership proof"), ("v2 a b c d", "malformed"), ("v1 a zz 00 00", "hex"),
    ("v1 onlythree parts", "malformed")])
def test_malformed_headers_are_named(value, reason):
    with pytest.raises(MembershipRefused, match=reason):
        mp.parse_header(value)


@pytest.mark.parametrize("purpose, node, nonce, reason", [
    ("/rmqstore.admin.v1.Admin/Status", NODE, b"x" * 16, "not a member-only call"),
    (PURPOSE, "", b"x" * 16, "node id"), (PURPOSE, "a b", b"x" * 16, "node id"),
    (PURPOSE, NODE, b"x" * 15, "client_nonce"), (PURPOSE, NODE, b"x" * 65, "client_nonce")])
def test_bad_challenges_are_refused(purpose, node, nonce, reason):
    with pytest.raises(MembershipRefused, match=reason):
        ChallengeBook(SECRET, ManualClock()).issue(purpose, node, nonce)


FIELDS = ("node_id", "client_nonce", "server_nonce", "proof")


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(FIELDS), flip=st.integers(min_value=0, max_value=255))
def test_any_change_to_a_proof_is_refused(field, flip):
    """A presented proof altered in any field admits nobody (and the true one still works on
    a fresh challenge)."""
    book = ChallengeBook(SECRET, ManualClock())
    honest = answered(book)
    value = getattr(honest, field)
    if isinstance(value, str):
        altered = value + chr(ord("a") + flip % 26)
    else:
        data = bytearray(value)
        data[flip % len(data)] ^= (flip % 255) + 1
        altered = bytes(data)
    forged = PresentedProof(**{**honest.__dict__, field: altered})
    with pytest.raises(MembershipRefused):
        book.admit(PURPOSE, forged)
    assert book.admit(PURPOSE, answered(book)) == NODE
