"""Hypothesis strategies for the fuzz tests of tests/security: any protobuf request built from
its descriptor, with field values picked among the ones that break servers (empty, blank,
control characters, reserved names, extremes of every integer type, unknown enum numbers,
oversized bytes), plus random values; raw bytes that are not a valid protobuf; and the checks
every answer must pass."""
from __future__ import annotations

import gzip
from typing import Any

import grpc
from google.protobuf import descriptor as pd
from google.protobuf.message import Message
from hypothesis import strategies as st

I32 = (-2 ** 31, 2 ** 31 - 1)
I64 = (-2 ** 63, 2 ** 63 - 1)
U32 = (0, 2 ** 32 - 1)
U64 = (0, 2 ** 64 - 1)

TOPIC = "fuzz-T"  # a topic the fuzzed node holds messages of
GROUP = "fuzz-G"
BIG_TEXT = "x" * 20_000
# Names that RocketMQ's rules refuse or treat specially, and handles of the wrong shape.
STRINGS = [
    "", " ", "\t", TOPIC, GROUP, "T", "G", "*", "a b", "a\x00b", "\x01", "\x7f", "|", "a|b",
    "a||b", "%RETRY%G", "%DLQ%G", "rmq_sys_X", "RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX",
    "TBW102", "CID_RMQ_SYS_X", "x" * 121, "x" * 128, "x" * 256, "é" * 40, "\u202e", "😀",
    "R2:0:0:0:" + "0" * 32, "R1:0:0:0:00000000", "R2:-1:0:0:" + "0" * 32, "0" * 32,
    "0" * 32 + "-" + "0" * 32, "7F000001" + "0" * 24, "127.0.0.1:1", "ipv4:1.2.3.4", "..",
    "../../etc/passwd", "SLAVE", "ASYNC_MASTER", "maxMessageSize", "brokerRole",
    "storePathRootDir", "-1", "99999999999999999999", "NaN", BIG_TEXT,
]
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=24)
text_values = st.one_of(st.sampled_from(STRINGS), _text)


def gzip_bomb(size: int = 8 * 1024 * 1024) -> bytes:
    return gzip.compress(b"\0" * size)


BYTES = [b"", b"x", b"\x1f\x8b\x08\x00garbage", gzip.compress(b"fine"), gzip_bomb(),
         b"y" * (256 * 1024 + 1)]  # one over the test nodes' maxMessageSize


def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted({v for v in (low, high, low + 1, high - 1, -1, 0, 1, 2, 1000, 2 ** 31,
                                2 ** 32, 10 ** 11, 10 ** 15) if low <= v <= high})
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    pd.FieldDescriptor.TYPE_INT32: _ints(*I32), pd.FieldDescriptor.TYPE_SINT32: _ints(*I32),
    pd.FieldDescriptor.TYPE_SFIXED32: _ints(*I32), pd.FieldDescriptor.TYPE_INT64: _ints(*I64),
    pd.FieldDescriptor.TYPE_SINT64: _ints(*I64), pd.FieldDescriptor.TYPE_SFIXED64: _ints(*I64),
    pd.FieldDescriptor.TYPE_UINT32: _ints(*U32), pd.FieldDescriptor.TYPE_FIXED32: _ints(*U32),
    pd.FieldDescriptor.TYPE_UINT64: _ints(*U64), pd.FieldDescriptor.TYPE_FIXED64: _ints(*U64),
    pd.FieldDescriptor.TYPE_BOOL: st.booleans(),
    pd.FieldDescriptor.TYPE_DOUBLE: st.floats(allow_nan=True),
    pd.FieldDescriptor.TYPE_FLOAT: st.floats(width=32, allow_nan=True),
    pd.FieldDescriptor.TYPE_STRING: text_values,
    pd.FieldDescriptor.TYPE_BYTES: st.one_of(st.sampled_from(BYTES), st.binary(max_size=64)),
}
# Durations never say "wait a while" (0 < d < 31 s): a valid long poll on an empty queue would
# only make the run slow; every other value, valid or not, is fair game.
_DURATION_SECONDS = st.sampled_from([-2 ** 63, -1, 0, 31, 3600, 12 * 3600 + 1, 10 ** 11,
                                     2 ** 63 - 1])
_NANOS = st.sampled_from([-1, 0, 1, 999_999_999, 1_000_000_000, 2 ** 31 - 1, -2 ** 31])
_WELL_KNOWN = {
    "google.protobuf.Duration": lambda cls: st.builds(cls, seconds=_DURATION_SECONDS,
                                                      nanos=_NANOS),
    "google.protobuf.Timestamp": lambda cls: st.builds(
        cls, seconds=st.one_of(st.sampled_from([0, 1, 1_700_000_000, 4_000_000_000, 10 ** 11,
                                                2 ** 63 - 1, -1, -2 ** 63])),
        nanos=_NANOS),
}


def _resources(cls: type[Message]) -> st.SearchStrategy[Message]:
    """Mostly names that pass validation (so the fuzz reaches the checks behind it), else any."""
    valid = st.builds(cls, name=st.sampled_from([TOPIC, GROUP, "alive-T"]))
    return st.one_of(valid, valid, valid, messages(cls, 4, _generic=True))


_WELL_KNOWN["apache.rocketmq.v2.Resource"] = _resources


def _field_values(field: pd.FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == pd.FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type._concrete_class, depth + 1)
    if field.type == pd.FieldDescriptor.TYPE_ENUM:
        numbers = [v.number for v in field.enum_type.values]
        return st.sampled_from(numbers + [-1, 99, 2 ** 31 - 1])
    return _SCALARS[field.type]


def _is_map(field: pd.FieldDescriptor) -> bool:
    return (field.type == pd.FieldDescriptor.TYPE_MESSAGE
            and field.message_type.GetOptions().map_entry)


def messages(cls: type[Message], depth: int = 0, _generic: bool = False,
             **fixed: st.SearchStrategy[Any]) -> st.SearchStrategy[Message]:
    """Any `cls` message: each field absent or one of its fuzz values (nested messages up to
    depth 3, repeated and map fields up to 3 entries, sometimes a 2000-entry one); `fixed`
    replaces the strategy of the named fields."""
    desc = cls.DESCRIPTOR
    if desc.full_name in _WELL_KNOWN and not _generic:
        return _WELL_KNOWN[desc.full_name](cls)
    if depth > 3 and not _generic:
        return st.just(cls())
    optional: dict[str, st.SearchStrategy[Any]] = {}
    required: dict[str, st.SearchStrategy[Any]] = {}
    for field in desc.fields:
        if field.name in fixed:
            optional[field.name] = fixed[field.name]
            continue
        if _is_map(field):
            key_f, value_f = field.message_type.fields_by_name["key"], \
                field.message_type.fields_by_name["value"]
            small = st.dictionaries(_field_values(key_f, depth), _field_values(value_f, depth),
                                    max_size=3)
            many = st.just({f"k{i}": "v" for i in range(2000)}) \
                if key_f.type == value_f.type == pd.FieldDescriptor.TYPE_STRING else small
            optional[field.name] = st.one_of(small, small, many)
        elif field.is_repeated:
            values = _field_values(field, depth)
            optional[field.name] = st.one_of(st.lists(values, max_size=3),
                                             st.lists(values, min_size=2000, max_size=2000)
                                             if field.type != pd.FieldDescriptor.TYPE_MESSAGE
                                             else st.lists(values, max_size=3))
        else:
            optional[field.name] = _field_values(field, depth)
        if field.name in _ALWAYS and depth == 0:  # present in a request, so the fuzz goes on
            required[field.name] = optional.pop(field.name)
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: _build(cls, kw))


_ALWAYS = frozenset({"topic", "group", "message_queue"})


def _build(cls: type[Message], fields: dict[str, Any]) -> Message:
    m = cls()
    for name, value in fields.items():
        field = cls.DESCRIPTOR.fields_by_name[name]
        if _is_map(field):
            getattr(m, name).update(value)
        elif field.is_repeated:
            getattr(m, name).extend(value)
        elif field.type == pd.FieldDescriptor.TYPE_MESSAGE:
            getattr(m, name).CopyFrom(value)
        else:
            setattr(m, name, value)
    return m


def _set_paths(m: Message, prefix: tuple = (), depth: int = 0) -> list[tuple]:
    """The paths (field descriptors from the top) of every field set in `m`, nested ones
    included (two levels down)."""
    out = []
    for field, value in m.ListFields():
        path = (*prefix, field)
        out.append(path)
        if depth < 2 and field.type == pd.FieldDescriptor.TYPE_MESSAGE and not field.is_repeated:
            out.extend(_set_paths(value, path, depth + 1))
    return out


def _copy_field(target: Message, source: Message, field: pd.FieldDescriptor) -> None:
    target.ClearField(field.name)
    if _is_map(field):
        getattr(target, field.name).update(getattr(source, field.name))
    elif field.is_repeated:
        getattr(target, field.name).extend(getattr(source, field.name))
    elif field.type == pd.FieldDescriptor.TYPE_MESSAGE:
        getattr(target, field.name).CopyFrom(getattr(source, field.name))
    else:
        setattr(target, field.name, getattr(source, field.name))


@st.composite
def one_field_replaced(draw, valid: Message) -> Message:
    """`valid` with one field, at any depth, taken from a fuzzed message of its type: the
    checks behind the first field are reached too."""
    other = draw(messages(type(valid)))
    paths = _set_paths(other)
    out = type(valid)()
    out.CopyFrom(valid)
    if not paths:
        return out
    path = draw(st.sampled_from(paths))
    target, source = out, other
    for field in path[:-1]:
        target, source = getattr(target, field.name), getattr(source, field.name)
    _copy_field(target, source, path[-1])
    return out


# Raw request bodies that are not (or not certainly) valid protobuf.
raw_bodies = st.one_of(
    st.binary(max_size=256),
    st.sampled_from([b"\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x08" + b"\xff" * 11,
                     b"\x0a\x05abc", b"\x12\x80\x80\x80\x80\x08", b"\x7a\x00" * 100,
                     b"\x0b" * 50, b"\x0c"]))


def method_paths(service: pd.ServiceDescriptor) -> list[tuple[str, pd.MethodDescriptor]]:
    return [(f"/{service.full_name}/{m.name}", m) for m in service.methods]


BAD_GRPC_CODES = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                  grpc.StatusCode.DEADLINE_EXCEEDED)


def check_rpc_error(e: grpc.RpcError, what: str) -> None:
    """A refusal in gRPC terms must name its reason, never be an unexpected failure (UNKNOWN,
    INTERNAL) or a hang (DEADLINE_EXCEEDED)."""
    assert e.code() not in BAD_GRPC_CODES, f"{what}: {e.code()} {e.details()}"
    assert e.details(), f"{what}: {e.code()} without a message"
