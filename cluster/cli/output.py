"""How commands print: aligned tables for people, JSON for scripts, and refusals on stderr."""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Iterable, Sequence

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from common.text_output import format_table


def to_dict(msg: Message) -> dict[str, Any]:
    """Every field, defaults included, under its proto name (what scripts expect to find), with
    64-bit integers as JSON numbers (protobuf's JSON mapping writes them as strings)."""
    return _numbers(MessageToDict(msg, always_print_fields_with_no_presence=True,
                                  preserving_proto_field_name=True), msg.DESCRIPTOR)


_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
          FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64}


def _numbers(data: dict[str, Any], descriptor) -> dict[str, Any]:
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.type in _INT64:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
        elif field.message_type is not None:
            sub = field.message_type
            if sub.GetOptions().map_entry:
                v = sub.fields_by_name["value"]
                if v.type in _INT64:
                    data[field.name] = {k: int(x) for k, x in value.items()}
                elif v.message_type is not None:
                    data[field.name] = {k: _numbers(x, v.message_type) for k, x in value.items()}
            elif isinstance(value, list):
                data[field.name] = [_numbers(x, sub) for x in value]
            elif isinstance(value, dict):
                data[field.name] = _numbers(value, sub)
    return data


def print_json(obj: Message | list | dict) -> None:
    if isinstance(obj, Message):
        obj = to_dict(obj)
    elif isinstance(obj, list):
        obj = [to_dict(o) if isinstance(o, Message) else o for o in obj]
    print(json.dumps(obj, indent=2, sort_keys=False))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "") -> None:
    """Left-aligned text, right-aligned numbers, two spaces between columns."""
    rows = [[_cell(v) for v in row] for row in rows]
    numeric = [all(row[i][1] for row in rows) for i in range(len(headers))]
    lines = format_table(headers, [[text for text, _ in row] for row in rows],
                         right={i for i, num in enumerate(numeric) if num}, indent=indent)
    for line in lines:
        print(line)


def _cell(value: Any) -> tuple[str, bool]:
    if isinstance(value, bool):
        return ("true" if value else "false"), False
    if isinstance(value, (int, float)):
        return (f"{value:.3f}" if isinstance(value, float) else str(value)), True
    return ("" if value is None else str(value)), False


def fmt_ms(ms: int) -> str:
    """Local time with milliseconds, or "-" for 0."""
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def refused(command: str, error: grpc.RpcError) -> int:
    """Print why the node refused (or could not be reached) and return exit status 1."""
    print(f"{command} failed: {error.code().name}: {error.details()}", file=sys.stderr)
    return 1
