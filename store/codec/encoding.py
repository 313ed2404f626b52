"""Message -> record bytes (the put path): encode, the fields patched under the put lock
(patch_record), the end-of-file filler. The layout is in layout.py."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from ..errors import MessageIllegal, PropertiesSizeExceeded
from .layout import (
    MAGIC_V1, MAGIC_V2, BLANK_MAGIC, MAX_PROPERTIES_SIZE, PROPERTY_KEYS, PROPERTY_TAGS,
    PROP_CRC_NAME, PROP_CRC_RESERVED_LEN, QUEUE_OFFSET_POS, SysFlag, pack_host_address,
    parse_host, _HEADERS, _I16, _I32, _I64, _QO_PO, _SIZE_MAGIC, _U8)

if TYPE_CHECKING:
    from store.dedup.window import SentAs

    from .dispatch import DispatchRequest


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
    body_crc: int = 0  # the header's bodyCRC
    # What reput will dispatch for this record, filled in under the put lock (store.codec.dispatch:
    # dispatch_hint); None when reput must decode the record.
    hint: "DispatchRequest | None" = None
    # The client send this record stores, for the duplicate window (store/dedup/window.py:
    # SentAs, set by the put's input); None when the window is off or the record is not one.
    sent_as: "SentAs | None" = None

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
    body_crc = zlib.crc32(body) & 0x7FFFFFFF
    buf = _EMPTY_BUFFER.join((header.pack(
        total, MAGIC_V2 if len(topic) > 127 else MAGIC_V1, body_crc, msg.queue_id, msg.flag,
        0, 0, sys_flag, msg.born_timestamp, born_addr, born_port, 0, store_addr, store_port,
        msg.reconsume_times, msg.prepared_transaction_offset, blen),
        body, topic_field, plen.to_bytes(2, "big"), props_bytes))
    return EncodedRecord(buf, 56 if not born_v6 else 68, append_prop_crc,
                         sys_flag & SysFlag.TRANSACTION_MASK, sys_flag, text, body_crc)


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
