"""Protobuf's base-128 varints: the one encoder and decoder of the project, for the places that
write or read protobuf bytes without protobuf (replication chunks, delivered messages, batched
sends), where building a message would copy the data.

    value               bytes on the wire (first byte first)
    ------------------  ------------------------------------------------------------------
    0 .. 2^7-1          0ggggggg                          group 0 = bits 0-6
    2^7 .. 2^14-1       1ggggggg 0ggggggg                 group 0, then group 1 = bits 7-13
    2^14 .. 2^21-1      1ggggggg 1ggggggg 0ggggggg        groups 0, 1, 2 = bits 14-20
    ...                 7 bits per byte
    2^63 .. 2^64-1      9 bytes 1ggggggg, then 0000000g   10 bytes: the most there is

Each byte holds 7 bits of the value, the least significant group first (little-endian
groups); its high bit (MSB, 0x80) is set when another byte follows. A negative int64 or int32
field is written as its 64-bit two's complement (always 10 bytes); the callers here only write
lengths and counts, so `encode_varint` takes 0 .. 2^64-1 and the reader of a signed field
converts what `decode_varint` returns.
"""
from __future__ import annotations

MAX_VARINT_BYTES = 10
_LIMIT = 1 << 64
# One-byte varints ready-made: a length or small count is most of what is encoded.
_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))


class VarintError(ValueError):
    """Bytes that hold no complete varint, or a value no varint can hold."""


def encode_varint(value: int) -> bytes:
    """The varint of `value` (0 .. 2^64-1)."""
    if value < 0x80:
        if value >= 0:
            return _ONE_BYTE[value]
    elif value < 0x4000:  # a message's length mostly: two bytes
        return bytes((value & 0x7F | 0x80, value >> 7))
    elif value < _LIMIT:
        out = bytearray()
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
        return bytes(out)
    raise VarintError(f"{value} does not fit a varint (0 .. 2^64-1)")


def decode_varint(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(value, the position after it) of the varint at `data[pos]`. Raises VarintError when
    the data ends inside it or it runs past MAX_VARINT_BYTES."""
    value = shift = 0
    start = pos
    try:
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos
            shift += 7
            if shift > 63:  # a 10th byte (MAX_VARINT_BYTES) that says another follows
                raise VarintError(f"varint at byte {start} is longer than "
                                  f"{MAX_VARINT_BYTES} bytes")
    except IndexError:
        raise VarintError(f"truncated varint at byte {start}: the data ends at byte "
                          f"{len(data)} inside it") from None
