"""Record bytes -> what they are (the read paths): check_record and decode for recovery, reads,
the slave and the audit; the offset message id; reput's lean one-pass decode
(dispatch_fields). The layout is in layout.py."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Union

from ..errors import MessageIllegal
from .layout import (
    MAGIC_V1, MAGIC_V2, BLANK_MAGIC, KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROP_CRC_RESERVED_LEN, QUEUE_OFFSET_POS,
    RecordKind, SYS_FLAG_POS, SysFlag, header_size, host_text, pack_host_address, parse_host,
    string_to_properties, unpack_host_address, _HEADERS, _I16, _I32, _I64, _QO_PO, _SIZE_MAGIC)


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
        host_text(born_addr, born_port), store_ts, host_text(store_addr, store_port), reconsume,
        prepared, body, topic,
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
# From magic to bodyLength, only what dispatch needs, in one unpack per variant: (magic,
# bodyCRC, queueId, queueOffset, sysFlag, storeTimestamp, preparedTransactionOffset, bodyLength).
_DISPATCH_HEADERS = {
    (born_v6, store_v6): struct.Struct(
        ">4xIIi4xq8xi8x" + ("20x" if born_v6 else "8x") + "q"
        + ("20x" if store_v6 else "8x") + "4xqi")
    for born_v6 in (False, True) for store_v6 in (False, True)}
_DISPATCH_V4 = _DISPATCH_HEADERS[(False, False)]
_HOSTS_V6 = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6


def dispatch_fields(buf, pos: int, limit: int
                    ) -> tuple[int, int, int, int, int, int, str, str, int] | None:
    """Check and decode the record at `pos` for dispatch in one pass: (totalSize, queue_id,
    queue_offset, sys_flag, store_timestamp, prepared_tx_offset, topic, properties text,
    bodyCRC). The body CRC is read from the header, not computed (no CRC check here): the
    duplicate window compares a repeated send's body by it (store/dedup/).

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
    magic, body_crc, queue_id, queue_offset, sys_flag, store_ts, prepared, body_len = \
        _DISPATCH_V4.unpack_from(buf, pos)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return None
    hsize = 84 + 4
    if sys_flag & _HOSTS_V6:
        header = _DISPATCH_HEADERS[(bool(sys_flag & SysFlag.BORNHOST_V6),
                                    bool(sys_flag & SysFlag.STOREHOST_V6))]
        if header.size + 3 > total:
            return None  # check_record: the topic length would lie past the record
        magic, body_crc, queue_id, queue_offset, sys_flag, store_ts, prepared, body_len = \
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
    return total, queue_id, queue_offset, sys_flag, store_ts, prepared, topic, props, body_crc


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
