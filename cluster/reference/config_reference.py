"""The configuration reference: every key of broker.conf, controller.conf and an archive's
conf, from the tables that parse them (each config module's KEY_DOCS), with the type and the
default read from the config the parser builds from an empty file, and whether the running
node takes a change (Admin UpdateConfig's allow-list, cluster/admin/runtime_config.py)."""
from __future__ import annotations

import enum
import functools
import os
from dataclasses import dataclass
from typing import Mapping

from common.config_values import KeyDoc
from store.config import FIELD_BY_KEY, KEY_DOCS as STORE_KEY_DOCS, StoreConfig

from cluster.admin.runtime_config import RUNTIME_KEYS
from cluster.archive import archive_config
from cluster.config import client_limits, shipping_config
from cluster.config.node_config import (NODE_KEY_DOCS, NODE_KEYS, NODE_STORE_DEFAULTS,
                                        node_config_from_properties)
from cluster.controller import controller_config
from cluster.reference.markdown import cell, code, table
from cluster.security import access, tls

# A secret for the configs that need one to be built at all (the archive's); never shown.
_SECRET = {"clusterSecret": "reference-secret-0123456789"}


@dataclass(frozen=True)
class KeyTable:
    """One table of keys: `docs` of one config module, whose fields live at `prefix` (dotted)
    of the parsed config; `fields` maps a key to its field where the docs do not say it."""
    title: str
    docs: Mapping[str, KeyDoc]
    prefix: str = ""
    fields: Mapping[str, str] | None = None

    def field(self, key: str) -> str:
        name = self.docs[key].field or (self.fields or {}).get(key, "")
        if not name:
            raise ValueError(f"{key}: its KeyDoc names no field")
        return f"{self.prefix}.{name}" if self.prefix else name


@dataclass(frozen=True)
class ConfigFile:
    """One kind of configuration file: its tables and the config parsed from `base` (an
    otherwise empty file)."""
    title: str
    intro: str
    tables: tuple[KeyTable, ...]
    parsed: object
    runtime: Mapping[str, str]
    parsed_keys: frozenset[str]


def node_file() -> ConfigFile:
    return ConfigFile(
        "broker.conf: a node",
        "Read by `python -m cluster node --config broker.conf` (and `--set key=value`); "
        "unknown keys are logged and ignored, as RocketMQ does. `python -m cluster config "
        "get` shows a running node's values, `config set` changes the keys marked *runtime* "
        "(in memory only: a restart reads broker.conf again); the others are read at start.",
        (KeyTable("Node: identity, client API, controller", NODE_KEY_DOCS),
         KeyTable("Store and replication", STORE_KEY_DOCS, "store", FIELD_BY_KEY),
         KeyTable("Access control (ACL)", access.ACL_KEY_DOCS, "acl"),
         KeyTable("TLS", tls.KEY_DOCS, "tls"),
         KeyTable("Client limits", client_limits.KEY_DOCS, "limits"),
         KeyTable("Shipping to the commitlog archive", shipping_config.KEY_DOCS, "shipping")),
        node_config_from_properties({}), RUNTIME_KEYS,
        frozenset(FIELD_BY_KEY) | NODE_KEYS)


def _process_file(kind: str, title: str, table_title: str, docs: Mapping[str, KeyDoc],
                  parsed: object, keys: frozenset[str]) -> ConfigFile:
    """The file of a controller or an archive server: its own keys and TLS, all read at
    start, unknown keys refused."""
    return ConfigFile(
        f"{kind}.conf: {title}",
        f"Read by `python -m cluster {kind} --config {kind}.conf` (and `--set key=value`); "
        f"unknown keys are refused. Every key is read at start.",
        (KeyTable(table_title, docs),
         KeyTable("TLS", tls.KEY_DOCS, "tls")), parsed, {}, keys)


def controller_file() -> ConfigFile:
    c = controller_config
    return _process_file("controller", "a controller", "Controller", c.KEY_DOCS,
                         c.controller_config_from_properties({}), c.KEYS)


def archive_file() -> ConfigFile:
    a = archive_config
    return _process_file("archive", "an archive server", "Archive server", a.KEY_DOCS,
                         a.archive_config_from_properties(_SECRET), a.KEYS)


FILES = (node_file, controller_file, archive_file)


def value_of(config: object, field: str) -> object:
    return functools.reduce(getattr, field.split("."), config)


def type_name(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, enum.Enum):
        return "one of " + ", ".join(m.value for m in type(value))
    if isinstance(value, (tuple, list)):
        return "list"
    return "string"


def shown(value: object) -> str:
    """A default as broker.conf spells it; the user's home folder as ~."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    text = str(value)
    home = os.path.expanduser("~")
    if home not in ("", "~", "/") and text.startswith(home + os.sep):
        text = "~" + text[len(home):]
    return text


def rows(file: ConfigFile, keys: KeyTable) -> list[list[str]]:
    """key | default | type, unit, runtime or read at start, and what it does."""
    embedded = StoreConfig(store_path_root_dir="-").to_properties()
    out = []
    for key, doc in keys.docs.items():
        value = value_of(file.parsed, keys.field(key))
        text = doc.text
        if key in NODE_STORE_DEFAULTS and keys.prefix == "store":
            text += f" (An embedded store's default: {embedded[key]}.)"
        facts = [type_name(value)] + ([doc.unit] if doc.unit else [])
        if key in file.runtime:
            facts.append("runtime")
            text += f" At runtime: {file.runtime[key]}."
        else:
            facts.append("read at start")
        out.append([code(key), code(shown(value)), f"*{cell(' · '.join(facts))}* " + cell(text)])
    return out


def render() -> str:
    parts = []
    for make in FILES:
        file = make()
        parts += [f"## {file.title}", "", file.intro, ""]
        for keys in file.tables:
            parts += [f"### {keys.title}", "",
                      table(["key", "default", "type · unit · when it takes effect; what it does"],
                            rows(file, keys)), ""]
    return "\n".join(parts)


def documented_keys(file: ConfigFile) -> set[str]:
    return {key for keys in file.tables for key in keys.docs}
