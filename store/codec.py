"""The one encoder/decoder of commitlog records, byte-compatible with RocketMQ.

Used by put, reput, recovery, the slave and the audit. All integers big-endian.

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
from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from operator import mul
from typing import TYPE_CHECKING, Union

from .errors import MessageIllegal, PropertiesSizeExceeded

if TYPE_CHECKING:
    from .dispatch import DispatchRequest

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


# -- message to encode -----------------------------------------------------------------------
@dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store (MessageExtBrokerInner's inputs)."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & SysFlag.TRANSACTION_MASK


@lru_cache(maxsize=4096)
def _topic_field(topic: str, v2_allowed: bool) -> bytes:
    data = topic.encode("utf-8")
    if len(topic) > 127:
        if not v2_allowed:
            raise MessageIllegal("topic", f"length {len(topic)} exceeds 127 without message version 2")
        if len(data) > 32767:
            raise MessageIllegal("topic", "too long")
        return _I16.pack(len(data)) + data
    if len(data) > 127:
        raise MessageIllegal("topic", "UTF-8 length exceeds 127 bytes")
    return _U8.pack(len(data)) + data


@lru_cache(maxsize=1024)
def _host_field(host: str) -> tuple[bytes, int]:
    ip, port = parse_host(host)
    return pack_host_address(ip), port


_TOPIC_FIELDS: dict[str, bytes] = {}  # plain dicts: cheaper per call than lru_cache here
_HOST_FIELDS: dict[str, tuple[bytes, int]] = {}
_EMPTY_BUFFER = bytearray()  # bytearray.join makes a new bytearray: the record, mutable


def _cached_host_field(host: str) -> tuple[bytes, int]:
    field = _host_field(host)
    if len(_HOST_FIELDS) < 4096:
        _HOST_FIELDS[host] = field
    return field


@dataclass(slots=True)
class EncodedRecord:
    """An encoded record waiting for the fields only known under the put lock."""

    data: bytearray
    store_timestamp_pos: int
    prop_crc: bool
    transaction_type: int
    sys_flag: int = 0  # as written, with the host-v6 bits
    properties_text: str = ""  # the properties as written (no CRC tail)
    # What reput will dispatch for this record, filled in under the put lock (store.dispatch:
    # dispatch_hint); None when reput must decode the record.
    hint: "DispatchRequest | None" = None

    def patch(self, queue_offset: int, physical_offset: int, store_timestamp: int) -> None:
        patch_record(self.data, 0, queue_offset, physical_offset, store_timestamp,
                     self.store_timestamp_pos, self.prop_crc)


def encode(msg: Message, *, v2_allowed: bool = True, append_prop_crc: bool = False,
           max_properties_size: int = MAX_PROPERTIES_SIZE,
           store_host: str | None = None) -> EncodedRecord:
    """Encode everything but queueOffset, physicalOffset and storeTimestamp (left zero).
    `store_host` overrides the message's (the broker stamps its own address). Raises
    MessageIllegal / PropertiesSizeExceeded; never returns a partial record."""
    props = msg.properties
    if append_prop_crc and PROP_CRC_NAME in props:
        # RocketMQ drops a client-supplied tail name before appending its own
        props = {k: v for k, v in props.items() if k != PROP_CRC_NAME}
    text = ""
    if props:
        text = "".join([f"{k}\x01{v}\x02" for k, v in props.items()])
        n = len(props)
        if text.count("\x01") != n or text.count("\x02") != n:
            raise MessageIllegal("property", "a name or value contains a separator character (0x01/0x02)")
        if "" in props:
            raise MessageIllegal("property", "empty property name")
        tag = props.get(PROPERTY_TAGS)
        if tag is not None and ("|" in tag or not tag.strip()):
            raise MessageIllegal("tag", f"{tag!r} is empty or contains '|'")
        props_bytes = text.encode("utf-8")
    else:
        props_bytes = b""
    if append_prop_crc:
        if props_bytes and not props_bytes.endswith(b"\x02"):
            props_bytes += b"\x02"
        props_bytes += b"__CRC32#\x01" + b"0" * 10 + b"\x02"
    plen = len(props_bytes)
    if plen > max_properties_size or plen > MAX_PROPERTIES_SIZE:
        raise PropertiesSizeExceeded(plen, min(max_properties_size, MAX_PROPERTIES_SIZE))
    topic = msg.topic
    topic_field = _TOPIC_FIELDS.get(topic) if v2_allowed else None
    if topic_field is None:
        topic_field = _topic_field(topic, v2_allowed)
        if v2_allowed and len(_TOPIC_FIELDS) < 65536:
            _TOPIC_FIELDS[topic] = topic_field
    born = _HOST_FIELDS.get(msg.born_host)
    if born is None:
        born = _cached_host_field(msg.born_host)
    shost = store_host or msg.store_host
    stored = _HOST_FIELDS.get(shost)
    if stored is None:
        stored = _cached_host_field(shost)
    born_addr, born_port = born
    store_addr, store_port = stored
    sys_flag = msg.sys_flag & ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    born_v6 = len(born_addr) == 16
    store_v6 = len(store_addr) == 16
    if born_v6:
        sys_flag |= SysFlag.BORNHOST_V6
    if store_v6:
        sys_flag |= SysFlag.STOREHOST_V6
    body = msg.body
    blen = len(body)
    header = _HEADERS[(born_v6, store_v6)]
    total = header.size + blen + len(topic_field) + 2 + plen
    # one join: a single allocation of the record (appending part by part grows it 4 times)
    buf = _EMPTY_BUFFER.join((header.pack(
        total, MAGIC_V2 if len(topic) > 127 else MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF,
        msg.queue_id, msg.flag, 0, 0, sys_flag, msg.born_timestamp, born_addr, born_port, 0,
        store_addr, store_port, msg.reconsume_times, msg.prepared_transaction_offset, blen),
        body, topic_field, plen.to_bytes(2, "big"), props_bytes))
    return EncodedRecord(buf, 56 if not born_v6 else 68, append_prop_crc,
                         sys_flag & SysFlag.TRANSACTION_MASK, sys_flag, text)


def patch_record(buf, pos: int, queue_offset: int, physical_offset: int, store_timestamp: int,
                 ts_pos: int, prop_crc: bool = False) -> None:
    """Fill the fields known only under the put lock (and the property CRC tail after them)."""
    _QO_PO.pack_into(buf, pos + QUEUE_OFFSET_POS, queue_offset, physical_offset)
    _I64.pack_into(buf, pos + ts_pos, store_timestamp)
    if prop_crc:
        total = _I32.unpack_from(buf, pos)[0]
        crc = zlib.crc32(memoryview(buf)[pos:pos + total - PROP_CRC_RESERVED_LEN]) & 0x7FFFFFFF
        digits = str(crc).zfill(10)[::-1].encode("ascii")
        start = pos + total - 11
        buf[start:start + 10] = digits


def encode_blank(remaining: int) -> bytes:
    """The end-of-file filler header; only its 8 bytes are written."""
    return _SIZE_MAGIC.pack(remaining, BLANK_MAGIC)


# -- decoding --------------------------------------------------------------------------------
@dataclass(slots=True)
class MessageRecord:
    """A decoded commitlog record (MessageExt as the store sees it)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]
    properties_raw: bytes = b""

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROPERTY_KEYS)
        return [k for k in raw.split(KEY_SEPARATOR) if k] if raw else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def msg_id(self) -> str:
        """The offset message id (store host + physical offset)."""
        ip, port = parse_host(self.store_host)
        return offset_msg_id(ip, port, self.physical_offset)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & SysFlag.TRANSACTION_MASK


@dataclass(frozen=True, slots=True)
class Blank:
    size: int
    kind: RecordKind = RecordKind.BLANK


@dataclass(frozen=True, slots=True)
class Empty:
    kind: RecordKind = RecordKind.EMPTY


@dataclass(frozen=True, slots=True)
class NeedMore:
    available: int
    needed: int
    kind: RecordKind = RecordKind.NEED_MORE


@dataclass(frozen=True, slots=True)
class Corrupt:
    reason: str
    kind: RecordKind = RecordKind.CORRUPT


DecodeResult = Union[MessageRecord, Blank, Empty, NeedMore, Corrupt]
EMPTY = Empty()


def check_record(buf, pos: int, limit: int, check_crc: bool = True,
                 verify_prop_crc: bool = False) -> tuple[RecordKind, int]:
    """Fast validity check used by recovery: (kind, size). Size is the record's totalSize for
    RECORD and BLANK, 0 otherwise. Allocates no objects for the common case."""
    avail = limit - pos
    if avail < 8:
        if avail > 0 and any(buf[pos:limit]):
            return RecordKind.NEED_MORE, 0
        return RecordKind.EMPTY, 0
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == MAGIC_V1 or magic == MAGIC_V2:
        if total < 91 or total > avail:
            return (RecordKind.NEED_MORE, 0) if total > avail else (RecordKind.CORRUPT, 0)
        sys_flag = _I32.unpack_from(buf, pos + SYS_FLAG_POS)[0]
        hsize = header_size(sys_flag)
        body_len = _I32.unpack_from(buf, pos + hsize - 4)[0]
        tpos = pos + hsize + body_len
        if body_len < 0 or tpos + 3 > pos + total:
            return RecordKind.CORRUPT, 0
        if magic == MAGIC_V1:
            tlen = buf[tpos]
            ppos = tpos + 1 + tlen
        else:
            tlen = _I16.unpack_from(buf, tpos)[0]
            ppos = tpos + 2 + tlen
        if ppos + 2 > pos + total:
            return RecordKind.CORRUPT, 0
        plen = _I16.unpack_from(buf, ppos)[0]
        if plen < 0 or ppos + 2 + plen != pos + total:
            return RecordKind.CORRUPT, 0
        if plen and buf[pos + total - 1] != 2:
            # properties always end with 0x02: a zero here is a torn tail the CRC cannot see
            return RecordKind.CORRUPT, 0
        if check_crc:
            stored = _I32.unpack_from(buf, pos + 8)[0]
            if stored != (zlib.crc32(buf[pos + hsize:pos + hsize + body_len]) & 0x7FFFFFFF):
                return RecordKind.CORRUPT, 0
            if verify_prop_crc and plen >= PROP_CRC_RESERVED_LEN:
                tail = bytes(buf[pos + total - 20:pos + total])
                if tail.startswith(b"__CRC32#\x01"):
                    want = int(tail[9:19][::-1])
                    if want != zlib.crc32(buf[pos:pos + total - 20]) & 0x7FFFFFFF:
                        return RecordKind.CORRUPT, 0
        return RecordKind.RECORD, total
    if magic == BLANK_MAGIC:
        return RecordKind.BLANK, total
    if total == 0 and magic == 0:
        return RecordKind.EMPTY, 0
    return RecordKind.CORRUPT, 0


def decode(buf, pos: int = 0, limit: int | None = None, *, check_crc: bool = True,
           read_body: bool = True) -> DecodeResult:
    """Decode the record at `pos`; `limit` is the end of valid bytes (default len(buf))."""
    if limit is None:
        limit = len(buf)
    kind, total = check_record(buf, pos, limit, check_crc)
    if kind is RecordKind.RECORD:
        return _decode_valid(buf, pos, total, read_body)
    if kind is RecordKind.BLANK:
        return Blank(total)
    if kind is RecordKind.EMPTY:
        return EMPTY
    if kind is RecordKind.NEED_MORE:
        need = _SIZE_MAGIC.unpack_from(buf, pos)[0] if limit - pos >= 8 else 8
        return NeedMore(limit - pos, need)
    return Corrupt(_corrupt_reason(buf, pos, limit, check_crc))


def _corrupt_reason(buf, pos: int, limit: int, check_crc: bool) -> str:
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        return f"bad magic 0x{magic:08X} at {pos}"
    if check_crc:
        return f"size or CRC mismatch in record of {total} bytes at {pos}"
    return f"inconsistent field lengths in record of {total} bytes at {pos}"


def _decode_valid(buf, pos: int, total: int, read_body: bool) -> MessageRecord:
    sys_flag = _I32.unpack_from(buf, pos + SYS_FLAG_POS)[0]
    header = _HEADERS[(bool(sys_flag & SysFlag.BORNHOST_V6), bool(sys_flag & SysFlag.STOREHOST_V6))]
    (_, magic, crc, queue_id, flag, queue_offset, physical_offset, _, born_ts, born_addr, born_port,
     store_ts, store_addr, store_port, reconsume, prepared, body_len) = header.unpack_from(buf, pos)
    bpos = pos + header.size
    body = bytes(buf[bpos:bpos + body_len]) if read_body else b""
    tpos = bpos + body_len
    if magic == MAGIC_V1:
        tlen = buf[tpos]
        tstart = tpos + 1
    else:
        tlen = _I16.unpack_from(buf, tpos)[0]
        tstart = tpos + 2
    topic = bytes(buf[tstart:tstart + tlen]).decode("utf-8", errors="replace")
    ppos = tstart + tlen
    plen = _I16.unpack_from(buf, ppos)[0]
    props_raw = bytes(buf[ppos + 2:ppos + 2 + plen])
    return MessageRecord(
        total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts,
        format_host(unpack_host_address(born_addr), born_port), store_ts,
        format_host(unpack_host_address(store_addr), store_port), reconsume, prepared, body, topic,
        string_to_properties(props_raw.decode("utf-8", errors="replace")), props_raw)


# -- offset message id ---------------------------------------------------------------------
def offset_msg_id(ip: str, port: int, physical_offset: int) -> str:
    return (pack_host_address(ip) + _I32.pack(port) + _I64.pack(physical_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """-> (ip, port, physical offset). Raises MessageIllegal for a malformed id."""
    if len(msg_id) not in (32, 56):
        raise MessageIllegal("message id", f"expected 32 or 56 hex characters, got {len(msg_id)}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as e:
        raise MessageIllegal("message id", "not hexadecimal") from e
    alen = len(raw) - 12
    port = _I32.unpack_from(raw, alen)[0]
    offset = _I64.unpack_from(raw, alen + 4)[0]
    return unpack_host_address(raw[:alen]), port, offset


def decode_dispatch_fields(buf, pos: int, total: int) -> tuple[int, int, int, int, int, str, dict[str, str]]:
    """Lean decode of a record already checked valid, for reput and the slave: returns
    (queue_id, queue_offset, sys_flag, store_timestamp, prepared_tx_offset, topic, properties)
    without copying the body."""
    queue_id = _I32.unpack_from(buf, pos + 12)[0]
    queue_offset, _ = _QO_PO.unpack_from(buf, pos + QUEUE_OFFSET_POS)
    sys_flag = _I32.unpack_from(buf, pos + SYS_FLAG_POS)[0]
    born_len = 20 if sys_flag & SysFlag.BORNHOST_V6 else 8
    store_ts = _I64.unpack_from(buf, pos + 48 + born_len)[0]
    hpos = pos + 56 + born_len + (20 if sys_flag & SysFlag.STOREHOST_V6 else 8)
    prepared = _I64.unpack_from(buf, hpos + 4)[0]
    body_len = _I32.unpack_from(buf, hpos + 12)[0]
    tpos = hpos + 16 + body_len
    if _I32.unpack_from(buf, pos + 4)[0] == -626843481:  # MAGIC_V1 as a signed i32
        tlen = buf[tpos]
        tstart = tpos + 1
    else:
        tlen = _I16.unpack_from(buf, tpos)[0]
        tstart = tpos + 2
    topic = str(buf[tstart:tstart + tlen], "utf-8", "replace")
    ppos = tstart + tlen
    plen = _I16.unpack_from(buf, ppos)[0]
    props = string_to_properties(str(buf[ppos + 2:ppos + 2 + plen], "utf-8", "replace")) if plen else {}
    return queue_id, queue_offset, sys_flag, store_ts, prepared, topic, props


# -- reput's lean decode -------------------------------------------------------------------
# From magic to bodyLength, only what dispatch needs, in one unpack per variant:
# (magic, queueId, queueOffset, sysFlag, storeTimestamp, preparedTransactionOffset, bodyLength).
_DISPATCH_HEADERS = {
    (born_v6, store_v6): struct.Struct(
        ">4xI4xi4xq8xi8x" + ("20x" if born_v6 else "8x") + "q"
        + ("20x" if store_v6 else "8x") + "4xqi")
    for born_v6 in (False, True) for store_v6 in (False, True)}
_DISPATCH_V4 = _DISPATCH_HEADERS[(False, False)]
_HOSTS_V6 = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


def dispatch_fields(buf, pos: int, limit: int) -> tuple[int, int, int, int, int, int, str, str] | None:
    """Check and decode the record at `pos` for dispatch in one pass: (totalSize, queue_id,
    queue_offset, sys_flag, store_timestamp, prepared_tx_offset, topic, properties text).

    None unless check_record(buf, pos, limit, check_crc=False) would say RECORD (the same
    rules, in the same order); the caller then asks check_record what lies there. Reput
    calls this once per record, so it reads each field once, with one unpack for the fixed
    header, and leaves the properties as text: dispatch needs only a few of them
    (property_value), and a dict of all of them cost more than the rest of the decode."""
    avail = limit - pos
    if avail < 91:
        return None
    total = _I32.unpack_from(buf, pos)[0]
    if total < 91 or total > avail:
        return None
    magic, queue_id, queue_offset, sys_flag, store_ts, prepared, body_len = \
        _DISPATCH_V4.unpack_from(buf, pos)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return None
    hsize = 84 + 4
    if sys_flag & _HOSTS_V6:
        header = _DISPATCH_HEADERS[(bool(sys_flag & SysFlag.BORNHOST_V6),
                                    bool(sys_flag & SysFlag.STOREHOST_V6))]
        if header.size + 3 > total:
            return None  # check_record: the topic length would lie past the record
        magic, queue_id, queue_offset, sys_flag, store_ts, prepared, body_len = \
            header.unpack_from(buf, pos)
        hsize = header.size
    end = pos + total
    tpos = pos + hsize + body_len
    if body_len < 0 or tpos + 3 > end:
        return None
    if magic == MAGIC_V1:
        tlen = buf[tpos]
        tstart = tpos + 1
    else:
        tlen = _I16.unpack_from(buf, tpos)[0]
        tstart = tpos + 2
    ppos = tstart + tlen
    if ppos + 2 > end:
        return None
    plen = _I16.unpack_from(buf, ppos)[0]
    if plen < 0 or ppos + 2 + plen != end or (plen and buf[end - 1] != 2):
        return None
    topic = str(buf[tstart:ppos], "utf-8", "replace")
    props = str(buf[ppos + 2:end], "utf-8", "replace") if plen else ""
    return total, queue_id, queue_offset, sys_flag, store_ts, prepared, topic, props


def property_value(text: str, name: str) -> str | None:
    """string_to_properties(text).get(name) without building the dict: the value of the last
    `name` 0x01 segment (a later duplicate wins, as in the dict), up to the next 0x02. `name`
    must be non-empty and free of 0x01 / 0x02 (true of every MessageConst name)."""
    i = text.rfind(f"\x02{name}\x01")
    if i >= 0:
        start = i + len(name) + 2
    elif text.startswith(f"{name}\x01"):
        start = len(name) + 1
    else:
        return None
    end = text.find("\x02", start)
    return text[start:] if end < 0 else text[start:end]
