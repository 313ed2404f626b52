"""RocketMQ 5 (apache.rocketmq.v2) messages <-> store records, and store outcomes -> v2 codes.

Send side (`to_store_messages`): validates like RocketMQ 5's proxy (SendMessageActivity) and
raises V2Error with the matching code before anything is written. Mapping onto the record:

    system_properties.message_id      -> UNIQ_KEY (required: ILLEGAL_MESSAGE_ID when blank)
    keys (repeated)                   -> KEYS, space-joined (RocketMQ's KEY_SEPARATOR)
    tag                               -> TAGS
    message_group (FIFO)              -> __SHARDINGKEY (and picks the queue, see
                                         cluster/messaging/send.py)
    delivery_timestamp (DELAY)        -> TIMER_DELIVER_MS (the store's schedule service holds the
                                         message until then). The official clients have a bug:
                                         they put MILLISECONDS into `seconds` for DELAY messages.
                                         A `seconds` value >= 10**11 (year 5138 as seconds, 1973
                                         as milliseconds) is therefore read as milliseconds.
    trace_context                     -> TRACE_CONTEXT
    born_timestamp                    -> the record's bornTimestamp (ms; now when absent)
    born_host                         -> the record's bornHost (that IP, port 0; the caller's IP
                                         when it is not an IP) and __BORNHOST (the string as sent)
    user_properties                   -> properties as they are (names RocketMQ reserves refused)
    body, body_encoding               -> IDENTITY: stored as is. GZIP: decompressed here and
                                         stored plain (no COMPRESSED flag), so the index, the
                                         Admin API, the audit and every reader see the real
                                         body, its CRC and its size (checked against
                                         maxMessageSize after decompression).
    message_type TRANSACTION          -> converted like a NORMAL message here;
                                         cluster/messaging/send.py turns it into a half
                                         message (cluster/messaging/transaction_records.py)
    message_type LITE / PRIORITY      -> NOT_IMPLEMENTED (lite topics and priorities are not
                                         implemented)

Delivery side (`record_to_v2`): the reverse, with body_encoding IDENTITY (a record written with
RocketMQ's zlib COMPRESSED flag is inflated), message_id = UNIQ_KEY (or the offset message id),
born/store timestamps and hosts, queue id/offset, delivery_attempt = reconsumeTimes + 1 and a
CRC32 body digest (8 uppercase hex digits, like the clients compute it).
"""
from __future__ import annotations

import ipaddress
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from proto.apache.rocketmq.v2 import definition_pb2 as d
from store import codec
from store.codec import Message, MessageRecord, SysFlag
from store.errors import MessageIllegal
from store.reader import TagFilter
from store.validation import check_group, check_topic

from .v2_status import V2Error

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"

# RocketMQ's MessageConst.STRING_HASH_SET plus the names this adapter writes itself: a user
# property with one of these names would be read back as a system property.
RESERVED_PROPERTY_NAMES = frozenset({
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC",
    "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY",
    "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE",
    "INNER_MULTI_QUEUE_OFFSET", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY", "TIMER_DEL_MS", "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#", PROPERTY_SHARDING_KEY,
    PROPERTY_TRACE_CONTEXT, "CHECK_IMMUNITY_TIME_IN_SECONDS", "__transactionId__",
    "TRANSACTION_CHECK_TIMES",
})
SECONDS_THAT_ARE_MILLIS = 10 ** 11  # see the module doc (client bug)


@dataclass(frozen=True)
class SendLimits:
    """What one SendMessage may carry (keys and defaults: cluster/config/client_limits.py)."""
    max_body: int  # maxMessageSize (per message body, after decompression; per batch)
    max_delay_ms: int  # timerMaxDelaySec in ms
    max_user_property_size: int = 16 * 1024  # user properties + tag + keys, UTF-8 bytes
    max_user_property_num: int = 128
    max_message_group_size: int = 64  # bytes; RocketMQ refuses >= this
    max_batch_count: int = 1024  # messages per request


# -- validation helpers --------------------------------------------------------------------------
_CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")


def has_control_character(text: str) -> bool:
    """Java's Character.isISOControl over the string (what the proxy refuses). A regex search
    runs in C: this is called for the id, tag, keys and properties of every message sent."""
    return _CONTROL_CHARACTERS.search(text) is not None


_control = _CONTROL_CHARACTERS.search  # (the per-message checks call it without a wrapper)


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def check_topic_resource(resource: d.Resource) -> str:
    """The topic name of a Resource; ILLEGAL_TOPIC (or NOT_IMPLEMENTED for a namespace)."""
    if resource.resource_namespace:
        raise V2Error(d.NOT_IMPLEMENTED, f"resource namespaces are not implemented yet "
                                         f"(namespace {resource.resource_namespace!r})")
    try:
        check_topic(resource.name)
    except MessageIllegal as e:
        raise V2Error(d.ILLEGAL_TOPIC, str(e)) from None
    return resource.name


def check_group_resource(resource: d.Resource) -> str:
    if resource.resource_namespace:
        raise V2Error(d.NOT_IMPLEMENTED, f"resource namespaces are not implemented yet "
                                         f"(namespace {resource.resource_namespace!r})")
    name = resource.name
    if name:
        try:
            check_group(name)
        except MessageIllegal as e:
            raise V2Error(d.ILLEGAL_CONSUMER_GROUP, str(e)) from None
    return name


# google.protobuf.Timestamp's own range ends at 9999-12-31T23:59:59Z; beyond it the
# milliseconds would not fit the record's i64 fields.
MAX_TIMESTAMP_SECONDS = 253_402_300_799


def timestamp_ms(ts: Timestamp, code: int, what: str) -> int:
    if not 0 <= ts.nanos < 1_000_000_000 or not 0 <= ts.seconds <= MAX_TIMESTAMP_SECONDS:
        raise V2Error(code, f"{what} {ts.seconds}s {ts.nanos}ns is not a valid timestamp "
                            f"(0..{MAX_TIMESTAMP_SECONDS} s, nanos 0..999999999)")
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def delivery_ms(ts: Timestamp) -> int:
    """Milliseconds of a delivery_timestamp, undoing the clients' seconds-as-millis bug."""
    if ts.seconds >= SECONDS_THAT_ARE_MILLIS:
        return ts.seconds
    return timestamp_ms(ts, d.ILLEGAL_DELIVERY_TIME, "delivery_timestamp")


def _gunzip(data: bytes, limit: int) -> bytes:
    z = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = z.decompress(data, limit + 1)
        if len(out) > limit:
            raise V2Error(d.MESSAGE_BODY_TOO_LARGE,
                          f"message body exceeds maxMessageSize {limit} bytes once decompressed")
        out += z.flush()
    except zlib.error as e:
        raise V2Error(d.MESSAGE_CORRUPTED, f"body_encoding GZIP but the body is not gzip: {e}") from None
    if not z.eof or z.unused_data:
        raise V2Error(d.MESSAGE_CORRUPTED, "body_encoding GZIP but the gzip stream is truncated "
                                           "or followed by other bytes")
    if len(out) > limit:
        raise V2Error(d.MESSAGE_BODY_TOO_LARGE,
                      f"message body exceeds maxMessageSize {limit} bytes once decompressed")
    return out


@lru_cache(maxsize=4096)
def born_host_field(born_host: str, peer_ip: str) -> str:
    """The record's bornHost ("ip:port"): the client's address if it is an IP, else the peer's.
    Cached: parsing with ipaddress costs more than the rest of a message's conversion, and a
    client sends the same values with every message."""
    for candidate in (born_host.strip(), peer_ip):
        try:
            ip = ipaddress.ip_address(candidate)
        except ValueError:
            continue
        return codec.format_host(str(ip), 0)
    return "127.0.0.1:0"


# -- send side ------------------------------------------------------------------------------------
def to_store_messages(messages: Sequence[d.Message], limits: SendLimits, now_ms: int,
                      peer_ip: str = "") -> tuple[str, list[Message]]:
    """(topic, store messages) of one SendMessageRequest; queue ids are left 0 (the caller
    picks the queue). Raises V2Error; the result is only built when every message is valid."""
    if not messages:
        raise V2Error(d.MESSAGE_CORRUPTED, "no message to send")
    if len(messages) > limits.max_batch_count:
        raise V2Error(d.PAYLOAD_TOO_LARGE, f"{len(messages)} messages in one request, at most "
                                           f"maxBatchMessageCount {limits.max_batch_count}")
    first = messages[0].topic
    topic = check_topic_resource(first)
    out = []
    for i, m in enumerate(messages):
        if m.topic != first:
            raise V2Error(d.MESSAGE_CORRUPTED, f"message {i} is for topic {m.topic.name!r}, the "
                                               f"batch for {topic!r}: one batch, one topic")
        try:
            out.append(_to_store_message(m, topic, limits, now_ms, peer_ip))
        except V2Error as e:
            if len(messages) > 1:
                e.message = f"message {i}: {e.message}"
                e.args = (e.message,)
            raise
    return topic, out


_REFUSED_TYPES = {d.LITE: "LITE messages", d.PRIORITY: "PRIORITY messages"}


_MESSAGE_TYPES = frozenset(d.MessageType.values())
_TAGS, _KEYS, _UNIQ_KEY = (codec.PROPERTY_TAGS, codec.PROPERTY_KEYS,
                           codec.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
_KEY_SEPARATOR = codec.KEY_SEPARATOR
_PLAIN_ENCODINGS = frozenset({d.IDENTITY, d.ENCODING_UNSPECIFIED})
_GZIP = d.GZIP


def _to_store_message(m: d.Message, topic: str, limits: SendLimits, now_ms: int,
                      peer_ip: str) -> Message:
    """One message, validated. Runs for every message sent (batches of hundreds per request):
    each protobuf field is read once into a local (an attribute of a upb message costs about
    0.1 us), string checks stay in C, and the optional string fields are read without
    HasField (unset reads as "", which means "absent" here too). The size of the encoded
    properties is checked where they are encoded (codec.encode, maxPropertiesSize, before
    anything of the batch is written), not here as well."""
    sp = m.system_properties
    message_type = sp.message_type
    refused = _REFUSED_TYPES.get(message_type)
    if refused is None and sp.HasField("lite_topic"):
        refused = _REFUSED_TYPES[d.LITE]
    if refused is not None:
        raise V2Error(d.NOT_IMPLEMENTED, f"{refused} are not implemented yet by this server")
    if message_type not in _MESSAGE_TYPES:
        raise V2Error(d.BAD_REQUEST, f"unknown message_type {message_type}")
    # body
    body = m.body
    encoding = sp.body_encoding
    if encoding not in _PLAIN_ENCODINGS:
        if encoding != _GZIP:
            raise V2Error(d.BAD_REQUEST, f"unknown body_encoding {encoding}")
        body = _gunzip(body, limits.max_body)
    if not body:
        raise V2Error(d.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > limits.max_body:
        raise V2Error(d.MESSAGE_BODY_TOO_LARGE, f"message body of {len(body)} bytes exceeds "
                                                f"maxMessageSize {limits.max_body}")
    # user properties
    props: dict[str, str] = {}
    user_size = 0
    user = m.user_properties
    if user:
        if len(user) > limits.max_user_property_num:
            raise V2Error(d.MESSAGE_PROPERTIES_TOO_LARGE,
                          f"{len(user)} user properties, at most userPropertyMaxNum "
                          f"{limits.max_user_property_num}")
        for name in sorted(user):
            value = user[name]
            if not name or not name.strip():
                raise V2Error(d.ILLEGAL_MESSAGE_PROPERTY_KEY,
                              "property name cannot be empty or blank")
            if name in RESERVED_PROPERTY_NAMES:
                raise V2Error(d.ILLEGAL_MESSAGE_PROPERTY_KEY,
                              f"property {name!r} is used by the system")
            if _control(name):
                raise V2Error(d.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property name {name!r} contains "
                                                              f"a control character")
            if _control(value):
                raise V2Error(d.ILLEGAL_MESSAGE_PROPERTY_KEY, f"the value of property {name!r} "
                                                              f"contains a control character")
            props[name] = value
            user_size += _utf8_len(name) + _utf8_len(value)
    # tag
    tag = sp.tag
    if tag:
        if not tag.strip():
            raise V2Error(d.ILLEGAL_MESSAGE_TAG, "tag cannot be blank")
        if "|" in tag:
            raise V2Error(d.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} contains '|'")
        if _control(tag):
            raise V2Error(d.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} contains a control character")
        props[_TAGS] = tag
        user_size += _utf8_len(tag)
    # keys
    keys = sp.keys
    if keys:
        kept = []
        for key in keys:
            if not key:
                continue
            if not key.strip():
                raise V2Error(d.ILLEGAL_MESSAGE_KEY, "key cannot be blank")
            if _control(key):
                raise V2Error(d.ILLEGAL_MESSAGE_KEY, f"key {key!r} contains a control character")
            kept.append(key)
            user_size += _utf8_len(key)
        if kept:
            props[_KEYS] = _KEY_SEPARATOR.join(kept)
    if user_size > limits.max_user_property_size:
        raise V2Error(d.MESSAGE_PROPERTIES_TOO_LARGE, f"user properties, tag and keys take "
                                                      f"{user_size} bytes, at most "
                                                      f"maxUserPropertySize "
                                                      f"{limits.max_user_property_size}")
    # message id
    message_id = sp.message_id
    if not message_id.strip():
        raise V2Error(d.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if _control(message_id):
        raise V2Error(d.ILLEGAL_MESSAGE_ID, "message id contains a control character")
    props[_UNIQ_KEY] = message_id
    # message group (FIFO)
    group = sp.message_group
    if group:
        if not group.strip():
            raise V2Error(d.ILLEGAL_MESSAGE_GROUP, "message group cannot be blank")
        if _utf8_len(group) >= limits.max_message_group_size:
            raise V2Error(d.ILLEGAL_MESSAGE_GROUP, f"message group of {_utf8_len(group)} bytes, "
                                                   f"must be shorter than maxMessageGroupSize "
                                                   f"{limits.max_message_group_size}")
        if _control(group):
            raise V2Error(d.ILLEGAL_MESSAGE_GROUP, "message group contains a control character")
        props[PROPERTY_SHARDING_KEY] = group
    # delivery time (DELAY)
    if sp.HasField("delivery_timestamp"):
        deliver = delivery_ms(sp.delivery_timestamp)
        if deliver - now_ms > limits.max_delay_ms:
            raise V2Error(d.ILLEGAL_DELIVERY_TIME, f"delivery time {deliver} is more than "
                                                   f"{limits.max_delay_ms} ms ahead")
        props[codec.PROPERTY_TIMER_DELIVER_MS] = str(deliver)
    trace = sp.trace_context
    if trace:
        if _control(trace):
            raise V2Error(d.BAD_REQUEST, "trace_context contains a control character")
        props[PROPERTY_TRACE_CONTEXT] = trace
    # born_timestamp: an unset one reads as 0 s 0 ns, which means "now" like an absent one
    born = sp.born_timestamp
    seconds, nanos = born.seconds, born.nanos
    if not 0 <= nanos < 1_000_000_000 or not 0 <= seconds <= MAX_TIMESTAMP_SECONDS:
        timestamp_ms(born, d.BAD_REQUEST, "born_timestamp")  # raises, naming the values
    sent_host = sp.born_host
    born_host = sent_host.strip() or peer_ip
    if born_host:
        if _control(born_host):
            raise V2Error(d.BAD_REQUEST, "born_host contains a control character")
        props[PROPERTY_BORN_HOST] = born_host
    # positional: Message(topic, body, queue_id, properties, flag, sys_flag, born_timestamp,
    # born_host), cheaper than keywords on this path
    return Message(topic, body if type(body) is bytes else bytes(body), 0, props, 0, 0,
                   seconds * 1000 + nanos // 1_000_000, born_host_field(sent_host, peer_ip))


# -- delivery side --------------------------------------------------------------------------------
_HIDDEN_ON_DELIVERY = RESERVED_PROPERTY_NAMES


def _set_ms(ts: Timestamp, ms: int) -> None:
    ts.seconds, ts.nanos = ms // 1000, ms % 1000 * 1_000_000


def delivered_body(record: MessageRecord) -> bytes:
    body = record.body
    if record.sys_flag & SysFlag.COMPRESSED:
        try:  # RocketMQ's classic producers deflate large bodies (zlib) and set this flag
            return zlib.decompress(body, wbits=32 + zlib.MAX_WBITS)
        except zlib.error:
            return body
    return body


def message_type_of(props: dict[str, str], sys_flag: int = 0) -> int:
    if props.get(codec.PROPERTY_TRANSACTION_PREPARED) == "true" or \
            sys_flag & SysFlag.TRANSACTION_MASK in (SysFlag.TRANSACTION_PREPARED_TYPE,
                                                    SysFlag.TRANSACTION_COMMIT_TYPE):
        return d.TRANSACTION
    if props.get(PROPERTY_SHARDING_KEY):
        return d.FIFO
    if props.get(codec.PROPERTY_TIMER_DELIVER_MS) or props.get(codec.PROPERTY_DELAY_TIME_LEVEL):
        return d.DELAY
    return d.NORMAL


def record_to_v2(record: MessageRecord, namespace: str = "",
                 out: d.Message | None = None) -> d.Message:
    """The delivered form of `record`; filled into `out` (an empty message) when given: a
    ReceiveMessageResponse's `message`, so a delivery built in place is not copied, body and
    all, into its response.

    Field by field into the message itself, not through keyword constructors: those built a
    Timestamp, a Digest and the SystemProperties apart and then copied each into its parent,
    which took twice as long (ReceiveMessage calls this for every delivery)."""
    if out is None:
        out = d.Message()
    props = record.properties
    body = delivered_body(record)
    sp = out.system_properties
    keys = record.keys
    if keys:
        sp.keys.extend(keys)
    sp.message_id = record.uniq_key or record.msg_id
    digest = sp.body_digest
    digest.type = d.CRC32
    digest.checksum = f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"
    sp.body_encoding = d.IDENTITY
    sp.message_type = message_type_of(props, record.sys_flag)
    _set_ms(sp.born_timestamp, record.born_timestamp)
    sp.born_host = props.get(PROPERTY_BORN_HOST) or codec.parse_host(record.born_host)[0]
    _set_ms(sp.store_timestamp, record.store_timestamp)
    sp.store_host = record.store_host
    sp.queue_id = record.queue_id
    sp.queue_offset = record.queue_offset
    sp.delivery_attempt = record.reconsume_times + 1
    if record.tags:
        sp.tag = record.tags
    if props.get(PROPERTY_SHARDING_KEY):
        sp.message_group = props[PROPERTY_SHARDING_KEY]
    if props.get(PROPERTY_TRACE_CONTEXT):
        sp.trace_context = props[PROPERTY_TRACE_CONTEXT]
    deliver = props.get(codec.PROPERTY_TIMER_DELIVER_MS, "")
    if deliver.isdigit():
        _set_ms(sp.delivery_timestamp, int(deliver))
    topic = out.topic
    topic.name = record.topic
    if namespace:
        topic.resource_namespace = namespace
    user = {k: v for k, v in props.items() if k not in _HIDDEN_ON_DELIVERY}
    if user:  # most records have none: the map is not touched then
        out.user_properties.update(user)
    out.body = body
    return out


def records_to_v2(records: Iterable[MessageRecord], namespace: str = "") -> list[d.Message]:
    return [record_to_v2(r, namespace) for r in records]


def tag_expression(expression: d.FilterExpression) -> str | None:
    """The validated TAG expression of a filter (None: every message)."""
    if expression.type == d.SQL:
        raise V2Error(d.NOT_IMPLEMENTED, "SQL92 filter expressions are not implemented yet")
    if expression.type not in (d.TAG, d.FILTER_TYPE_UNSPECIFIED):
        raise V2Error(d.ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {expression.type}")
    try:
        TagFilter.parse(expression.expression)
    except ValueError as e:
        raise V2Error(d.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
    return expression.expression or None
