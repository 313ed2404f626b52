"""common.varint: protobuf's base-128 varints, checked against protobuf's own encoder and
decoder and against the byte layout of the module's table."""
from __future__ import annotations

import pytest
from google.protobuf.internal.decoder import _DecodeVarint
from google.protobuf.internal.encoder import _VarintBytes
from hypothesis import given
from hypothesis import strategies as st

from common.varint import MAX_VARINT_BYTES, VarintError, decode_varint, encode_varint

U64 = st.integers(min_value=0, max_value=2 ** 64 - 1)


@pytest.mark.parametrize("value,wire", [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"),
    (128, b"\x80\x01"),                  # low group 0 with the continuation bit, then 1
    (300, b"\xac\x02"),                  # 300 = 0b10_0101100: 0101100 | 0x80, then 10
    (16_383, b"\xff\x7f"), (16_384, b"\x80\x80\x01"),
    (2 ** 63, b"\x80" * 9 + b"\x01"),
    (2 ** 64 - 1, b"\xff" * 9 + b"\x01"),
])
def test_the_byte_layout(value, wire):
    assert encode_varint(value) == wire
    assert decode_varint(wire) == (value, len(wire))


@given(U64)
def test_encoded_as_protobuf_encodes(value):
    assert encode_varint(value) == _VarintBytes(value)


@given(U64, st.binary(max_size=4), st.binary(max_size=4))
def test_round_trip_at_any_position(value, before, after):
    data = before + encode_varint(value) + after
    assert decode_varint(data, len(before)) == (value, len(data) - len(after))
    assert decode_varint(memoryview(data), len(before))[0] == value
    assert _DecodeVarint(data, len(before)) == (value, len(data) - len(after))


def test_ten_bytes_at_most():
    assert len(encode_varint(2 ** 64 - 1)) == MAX_VARINT_BYTES == 10
    assert len(encode_varint(2 ** 63 - 1)) == 9
    eleven = b"\xff" * 10 + b"\x01"
    with pytest.raises(VarintError, match="longer than 10 bytes"):
        decode_varint(eleven)


@pytest.mark.parametrize("value", [-1, -(2 ** 63), 2 ** 64, 2 ** 70])
def test_values_outside_64_bits_are_refused(value):
    with pytest.raises(VarintError, match="does not fit a varint"):
        encode_varint(value)


@pytest.mark.parametrize("data,pos", [(b"", 0), (b"\x80", 0), (b"\x05\xff\xff", 1),
                                      (encode_varint(2 ** 40)[:-1], 0)])
def test_a_truncated_varint_is_a_clear_error(data, pos):
    with pytest.raises(VarintError) as e:
        decode_varint(data, pos)
    assert str(e.value) == (f"truncated varint at byte {pos}: the data ends at byte "
                            f"{len(data)} inside it")
    assert isinstance(e.value, ValueError)
