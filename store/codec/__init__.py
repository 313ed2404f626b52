"""The one encoder/decoder of commitlog records, byte-compatible with RocketMQ.

Used by put, reput, recovery, the slave and the audit. Four modules, one job each:

    layout.py    the record's byte layout (the table), magics, sysFlag bits, field positions,
                 host fields, the tags hash code (Java String.hashCode), the properties text
    encoding.py  Message -> record bytes (encode, patch_record, encode_blank)
    decoding.py  record bytes -> MessageRecord / BLANK / EMPTY / NEED_MORE / CORRUPT
                 (check_record, decode), offset message ids, reput's dispatch_fields
    dispatch.py  the DispatchRequest a record becomes for the dispatchers (consume queues,
                 index), and the put's hint of it

Callers import the package (`from store import codec`, `codec.encode(...)`): every public
name of layout, encoding and decoding is re-exported here. dispatch.py builds on the package
and is imported as itself (`store.codec.dispatch`).
"""
from __future__ import annotations

from .layout import (  # noqa: F401
    MAGIC_V1, MAGIC_V2,
    BLANK_MAGIC, END_FILE_MIN_BLANK_LENGTH, PROP_CRC_RESERVED_LEN, PROP_CRC_NAME,
    MAX_PROPERTIES_SIZE, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, PROPERTY_KEYS,
    PROPERTY_TAGS, PROPERTY_WAIT_STORE_MSG_OK, PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TIMER_DELIVER_MS, PROPERTY_TRANSACTION_PREPARED, PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_MSG_REGION, KEY_SEPARATOR, SysFlag, RecordKind, QUEUE_OFFSET_POS,
    PHYSICAL_OFFSET_POS, SYS_FLAG_POS, BORN_TIMESTAMP_POS, host_len, store_timestamp_pos,
    store_timestamp_at, physical_offset_at, header_size, record_size, body_crc,
    pack_host_address, unpack_host_address, parse_host, format_host, java_string_hash,
    tags_code, properties_to_string, string_to_properties,
)
from .encoding import (  # noqa: F401
    Message, EncodedRecord, encode, patch_record, encode_blank,
)
from .decoding import (  # noqa: F401
    MessageRecord, Blank, Empty, NeedMore, Corrupt, DecodeResult, EMPTY, check_record, decode,
    offset_msg_id, decode_offset_msg_id, decode_dispatch_fields, dispatch_fields,
    property_value,
)

__all__ = [
    "annotations", "MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "END_FILE_MIN_BLANK_LENGTH",
    "PROP_CRC_RESERVED_LEN", "PROP_CRC_NAME", "MAX_PROPERTIES_SIZE", "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR", "PROPERTY_KEYS", "PROPERTY_TAGS", "PROPERTY_WAIT_STORE_MSG_OK",
    "PROPERTY_DELAY_TIME_LEVEL", "PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX",
    "PROPERTY_REAL_TOPIC", "PROPERTY_REAL_QUEUE_ID", "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TRANSACTION_PREPARED", "PROPERTY_TRANSACTION_CHECK_TIMES", "PROPERTY_MSG_REGION",
    "KEY_SEPARATOR", "SysFlag", "RecordKind", "QUEUE_OFFSET_POS", "PHYSICAL_OFFSET_POS",
    "SYS_FLAG_POS",
    "BORN_TIMESTAMP_POS", "host_len", "store_timestamp_pos", "store_timestamp_at",
    "physical_offset_at", "header_size", "record_size", "body_crc", "pack_host_address",
    "unpack_host_address", "parse_host", "format_host", "java_string_hash", "tags_code",
    "properties_to_string", "string_to_properties", "Message", "EncodedRecord", "encode",
    "patch_record", "encode_blank", "MessageRecord", "Blank", "Empty", "NeedMore", "Corrupt",
    "DecodeResult", "EMPTY", "check_record", "decode", "offset_msg_id", "decode_offset_msg_id",
    "decode_dispatch_fields", "dispatch_fields", "property_value",
]
