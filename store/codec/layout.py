"""The commitlog record's byte layout: sizes, magics, flags, field positions, host fields,
the tags hash code and the properties text. All integers big-endian.

Record layout (IPv4 hosts; an IPv6 host field is 16-byte address + i32 port = 20 bytes,
flagged in sysFlag, which shifts every later field):

    offset  size  field
    0       4     totalSize                  i32, whole record
    4       4     magic                      0xDAA320A7 (v1) | 0xDAA320AB (v2: 2-byte topic length)
    8       4     bodyCRC                    zlib.crc32(body) & 0x7FFFFFFF
    12      4     queueId                    i32
    16      4     flag                       i32
    20      8     queueOffset                i64 (0 for prepared/rollback transaction records)
    28      8     physicalOffset             i64
    36      4     sysFlag                    i32 (see SysFlag)
    40      8     bornTimestamp              i64 ms
    48      8     bornHost                   4-byte IPv4 + i32 port (20 bytes if BORNHOST_V6)
    56      8     storeTimestamp             i64 ms
    64      8     storeHost                  4-byte IPv4 + i32 port (20 bytes if STOREHOST_V6)
    72      4     reconsumeTimes             i32
    76      8     preparedTransactionOffset  i64
    84      4     bodyLength                 i32, then body bytes
    ..      1|2   topicLength                i8 (v1) | i16 (v2), then UTF-8 topic
    ..      2     propertiesLength           i16, then properties `name\\x01value\\x02`...

End-of-file filler (BLANK): i32 remaining bytes of the file, i32 0xCBD43194; the rest of the
file is left as is. Written when a record plus END_FILE_MIN_BLANK_LENGTH does not fit.

Optional property CRC tail (enabledAppendPropCRC): the last 20 property bytes are
`__CRC32#` 0x01 + 10 ASCII digits (least significant first) + 0x02, the CRC32 & 0x7FFFFFFF of
the record's first totalSize - 20 bytes.

Offset message id: uppercase hex of storeHost address + i32 port + i64 physical offset
(32 characters for IPv4, 56 for IPv6).
"""
from __future__ import annotations

import socket
import struct
import sys
import zlib
from enum import IntEnum
from functools import lru_cache
from operator import mul

from ..errors import MessageIllegal

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8
PROP_CRC_RESERVED_LEN = 20
PROP_CRC_NAME = "__CRC32#"
MAX_PROPERTIES_SIZE = 32767

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# Property names (org.apache.rocketmq.common.message.MessageConst)
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_MSG_REGION = "MSG_REGION"
KEY_SEPARATOR = " "


class SysFlag:
    """Bits of sysFlag (org.apache.rocketmq.common.sysflag.MessageSysFlag)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_NOT_TYPE = 0x0
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_COMMIT_TYPE = 0x8
    TRANSACTION_ROLLBACK_TYPE = 0xC
    TRANSACTION_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    INNER_BATCH = 0x80


class RecordKind(IntEnum):
    """What lies at a position of the commitlog."""

    RECORD = 0  # a complete, valid message record
    BLANK = 1  # end-of-file filler; the next record starts in the next file
    EMPTY = 2  # zero header: nothing has been written here
    NEED_MORE = 3  # the bytes end before the record does
    CORRUPT = 4  # bad magic, impossible size or CRC mismatch


# Header up to bodyLength for each (bornV6, storeV6) combination.
_HEADERS = {
    (False, False): struct.Struct(">iIiiiqqiq4siq4siiqi"),
    (True, False): struct.Struct(">iIiiiqqiq16siq4siiqi"),
    (False, True): struct.Struct(">iIiiiqqiq4siq16siiqi"),
    (True, True): struct.Struct(">iIiiiqqiq16siq16siiqi"),
}
_PREFIX = struct.Struct(">iIiiiqqi")  # totalSize .. sysFlag: 36 bytes, same for every variant
_SIZE_MAGIC = struct.Struct(">iI")
_QO_PO = struct.Struct(">qq")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U8 = struct.Struct(">B")
QUEUE_OFFSET_POS = 20
PHYSICAL_OFFSET_POS = 28
SYS_FLAG_POS = 36
BORN_TIMESTAMP_POS = 40


def host_len(v6: bool) -> int:
    return 20 if v6 else 8


def store_timestamp_pos(sys_flag: int) -> int:
    return 48 + host_len(bool(sys_flag & SysFlag.BORNHOST_V6))


def store_timestamp_at(buf, pos: int) -> int:
    """The storeTimestamp field of the record at `pos` (read as is, not checked; its place
    depends on the born host's length, given by the sysFlag)."""
    sys_flag = _I32.unpack_from(buf, pos + SYS_FLAG_POS)[0]
    return _I64.unpack_from(buf, pos + store_timestamp_pos(sys_flag))[0]


def physical_offset_at(buf, pos: int) -> int:
    """The physicalOffset field of the record at `pos` (read as is, not checked)."""
    return _I64.unpack_from(buf, pos + PHYSICAL_OFFSET_POS)[0]


def header_size(sys_flag: int) -> int:
    """Bytes before the body: fixed fields + both hosts + bodyLength."""
    return _HEADERS[(bool(sys_flag & SysFlag.BORNHOST_V6), bool(sys_flag & SysFlag.STOREHOST_V6))].size


def record_size(body_len: int, topic_len: int, props_len: int, sys_flag: int = 0) -> int:
    topic_field = 1 if topic_len <= 127 else 2
    return header_size(sys_flag) + body_len + topic_field + topic_len + 2 + props_len


def body_crc(body) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


# -- hosts -------------------------------------------------------------------------------
@lru_cache(maxsize=1024)
def pack_host_address(ip: str) -> bytes:
    """4 bytes for IPv4, 16 for IPv6."""
    try:
        return socket.inet_aton(ip) if ":" not in ip else socket.inet_pton(socket.AF_INET6, ip)
    except OSError as e:
        raise MessageIllegal("host", f"not an IP address: {ip!r}") from e


def unpack_host_address(raw: bytes) -> str:
    if len(raw) == 4:
        return socket.inet_ntoa(raw)
    return socket.inet_ntop(socket.AF_INET6, raw)


def parse_host(host: str) -> tuple[str, int]:
    """'1.2.3.4:10911' or '[::1]:10911' -> (ip, port)."""
    ip, sep, port = host.rpartition(":")
    if not sep:
        raise MessageIllegal("host", f"missing port in {host!r}")
    return ip.strip("[]"), int(port)


def format_host(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


@lru_cache(maxsize=4096)
def host_text(raw: bytes, port: int) -> str:
    """A record's packed host address and port as "ip:port". Cached: every read of a record
    formats two (born and store host), and a store sees few distinct ones."""
    return format_host(unpack_host_address(raw), port)


# -- Java String.hashCode -----------------------------------------------------------------
# hashCode is the polynomial sum(unit_i * 31**(n-1-i)) over the UTF-16 code units, mod 2**32.
# For ASCII text (every key and tag in practice) int(digits, 31) evaluates that polynomial
# in C, given base-31 digits: split each byte u into u % 31 + 31 * (u // 31), both below 31
# (u <= 127), so hash = int(low digits, 31) + 31 * int(high digits, 31), with the digit
# strings made by bytes.translate. That is ~4x faster than a sum over the units for a
# 45-character index key, and reput hashes two such keys per message.
_B31 = b"0123456789abcdefghijklmnopqrstu"
_B31_LOW = bytes(_B31[u % 31] for u in range(128)) + bytes(128)  # bytes >= 128: never used
_B31_HIGH = bytes(_B31[u // 31] for u in range(128)) + bytes(128)
_B31_CHUNK = 640  # int() refuses longer non-binary digit strings if int_max_str_digits is low
_B31_CHUNK_POW = pow(31, _B31_CHUNK, 1 << 32)
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
_POW31 = [pow(31, i, 1 << 32) for i in range(256)][::-1]
_POW_BY_LEN = [_POW31[len(_POW31) - n:] for n in range(len(_POW31) + 1)]  # no slicing per call


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode(): sum of UTF-16 units * 31^(n-1-i), wrapped to a signed i32."""
    if s.isascii():
        if not s:
            return 0
        b = s.encode("ascii")
        if len(b) <= _B31_CHUNK:
            h = int(b.translate(_B31_LOW), 31) + 31 * int(b.translate(_B31_HIGH), 31)
        else:
            h = 0
            for i in range(0, len(b), _B31_CHUNK):
                c = b[i:i + _B31_CHUNK]
                h = (h * (_B31_CHUNK_POW if len(c) == _B31_CHUNK else pow(31, len(c), 1 << 32))
                     + int(c.translate(_B31_LOW), 31) + 31 * int(c.translate(_B31_HIGH), 31))
                h &= 0xFFFFFFFF
    else:
        units = memoryview(s.encode(_UTF16_NATIVE)).cast("H")  # surrogate pairs: 2 units
        n = len(units)
        if n < len(_POW_BY_LEN):
            h = sum(map(mul, units, _POW_BY_LEN[n]))
        else:
            h = 0
            for u in units:
                h = (31 * h + u) & 0xFFFFFFFF
    h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """Consume-queue tagsCode: String.hashCode of the tag, sign-extended; 0 without a tag."""
    return java_string_hash(tags) if tags else 0


# -- properties ----------------------------------------------------------------------------
def properties_to_string(props: dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def string_to_properties(text: str) -> dict[str, str]:
    """RocketMQ's string2messageProperties: split on 0x02, name/value on 0x01, skip malformed."""
    out: dict[str, str] = {}
    for seg in text.split("\x02"):
        name, sep, value = seg.partition("\x01")
        if sep and name:
            out[name] = value
    return out
