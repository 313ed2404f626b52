"""The chunk checksum: CRC-32C by google-crc32c's native code where installed, crcmod otherwise;
both must give the same value for every input, or a master and a slave with different
libraries would refuse each other's chunks."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from common import crc


def test_the_known_check_value():
    assert crc.crc32c(b"123456789") == 0xE3069283  # CRC-32C's catalogued check value
    assert crc.crcmod_crc32c(b"123456789") == 0xE3069283
    assert crc.crc32c(b"") == 0


def test_the_native_implementation_is_used_when_installed():
    pytest.importorskip("google_crc32c")
    assert crc.IMPLEMENTATION == "google-crc32c" and crc.crc32c is crc.native_crc32c


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=70_000))
def test_both_implementations_agree(data):
    assert crc.crc32c(data) == crc.crcmod_crc32c(data)
    view = memoryview(data)[1:]  # any bytes-like input gives the same value
    assert crc.crc32c(view) == crc.crc32c(bytearray(view)) == crc.crcmod_crc32c(bytes(view))
