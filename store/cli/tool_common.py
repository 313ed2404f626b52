"""What every command of `python -m store` shares: exit statuses, the usage error, printing,
argument types, and the JSON/text form of a record."""
from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import Any

from store import codec
from store.codec import MessageRecord
from common.config_values import arg_int
from common.text_output import isatty, iso_ms

EXIT_OK = 0
EXIT_DAMAGE = 1  # verify found damage, or an operation on the store failed
EXIT_USAGE = 2  # bad arguments, not a store directory, bad config


class UsageError(Exception):
    """A problem with what the user asked for (exit code 2)."""


def emit(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def err(line: str) -> None:
    sys.stderr.write(line + "\n")


def json_line(obj: Any) -> None:
    emit(json.dumps(obj, ensure_ascii=False, sort_keys=False))


# argparse types of counts, queue ids and offsets (0x... too)
nonneg_int = arg_int(minimum=0)
pos_int = arg_int(minimum=1)


def progress_enabled(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "progress", False)) or isatty(sys.stderr)


def add_command(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand taking the store directory and --progress."""
    sp = sub.add_parser(name, help=help_text, description=help_text)
    sp.add_argument("dir", metavar="DIR", help="store root directory (storePathRootDir)")
    sp.add_argument("--progress", action="store_true",
                    help="progress on stderr even when it is not a terminal")
    return sp


def add_config_option(sp: argparse.ArgumentParser) -> None:
    """--config, for the commands that open the store."""
    sp.add_argument("--config", metavar="FILE", help="broker.conf-style settings")


# -- records ------------------------------------------------------------------------------------
def body_preview(body: bytes, limit: int = 60) -> str:
    text = body[:limit * 4].decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "." for c in text)
    return text[:limit] + ("..." if len(text) > limit or len(body) > limit * 4 else "")


def body_lines(body: bytes) -> list[str]:
    text = body.decode("utf-8", "replace")
    return ["    | " + line for line in text.splitlines() or [""]]


def record_dict(offset: int, rec: MessageRecord, *, with_body: bool = True,
                full_body_text: bool = False) -> dict[str, Any]:
    """The JSON form of a record (dump --json, get --json)."""
    d: dict[str, Any] = {
        "offset": offset, "size": rec.total_size, "topic": rec.topic, "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset, "sys_flag": rec.sys_flag, "flag": rec.flag,
        "store_timestamp": rec.store_timestamp, "store_time": iso_ms(rec.store_timestamp),
        "born_timestamp": rec.born_timestamp, "born_time": iso_ms(rec.born_timestamp),
        "born_host": rec.born_host, "store_host": rec.store_host,
        "reconsume_times": rec.reconsume_times, "tags": rec.tags, "keys": rec.keys,
        "uniq_key": rec.uniq_key, "msg_id": rec.msg_id, "properties": rec.properties,
        "body_length": len(rec.body), "body_crc_ok": codec.body_crc(rec.body) == rec.body_crc,
    }
    if with_body:
        d["body_base64"] = base64.b64encode(rec.body).decode("ascii")
        d["body_preview"] = body_preview(rec.body, 200)
        if full_body_text:
            d["body_text"] = rec.body.decode("utf-8", "replace")
    return d
