"""Reading an ACL file in RocketMQ's plain_acl.yml format into an `Acl` (acl.py).

    globalWhiteRemoteAddresses:      # accepted and IGNORED (see below)
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ          # longer than 6 characters, no spaces or ','
        secretKey: 12345678
        whiteRemoteAddress:          # accepted and IGNORED
        admin: false                 # true: every permission, and the Admin API
        defaultTopicPerm: DENY       # DENY (the default) | PUB | SUB | PUB|SUB
        defaultGroupPerm: SUB
        topicPerms:
          - topicA=DENY
          - topicB=PUB|SUB
        groupPerms:
          - groupA=SUB

Differences from RocketMQ, all in the stricter direction: an unknown permission word, an entry
without `=`, a duplicate access key or an unknown account field is an error naming the line,
not a silent DENY; the IP whitelists (`globalWhiteRemoteAddresses`, `whiteRemoteAddress`), which
in RocketMQ let matching addresses skip the signature check, are ignored with a warning: every
request must be signed by a user here.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import yaml

from common.config_values import ConfigError, parse_bool

from cluster.security.acl import Account, Acl, Perm, parse_perm

log = logging.getLogger(__name__)
ACCOUNT_FIELDS = frozenset({"accessKey", "secretKey", "whiteRemoteAddress", "admin",
                            "defaultTopicPerm", "defaultGroupPerm", "topicPerms", "groupPerms"})
TOP_FIELDS = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})
_LINE = "__line__"


class _LineLoader(yaml.BaseLoader):
    """YAML's base loader: no Python objects, and every scalar stays the text written (a secret
    like 0123, 1e3 or yes is that text, not a number or a boolean). It records each mapping's
    line for error messages."""

    def construct_mapping(self, node, deep=False):  # noqa: D102 (PyYAML's hook)
        mapping = super().construct_mapping(node, deep=deep)
        mapping[_LINE] = node.start_mark.line + 1
        return mapping


def parse_acl(text: str, source: str = "plain_acl.yml") -> Acl:
    """The Acl of a plain_acl.yml text; ConfigError naming `source`, the line and the field."""
    try:
        doc = yaml.load(text, Loader=_LineLoader)  # noqa: S506 (a BaseLoader subclass)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    if doc is None or doc == "":
        doc = {_LINE: 1}
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with 'accounts'")
    for key in doc:
        if key != _LINE and key not in TOP_FIELDS:
            raise ConfigError(f"{source} line {doc[_LINE]}: unknown field {key!r} "
                              f"(want {', '.join(sorted(TOP_FIELDS))})")
    if _present(doc.get("globalWhiteRemoteAddresses")):
        log.warning("%s: globalWhiteRemoteAddresses is ignored: every request must be signed",
                    source)
    raw_accounts = doc.get("accounts") if _present(doc.get("accounts")) else []
    if not isinstance(raw_accounts, list):
        raise ConfigError(f"{source} line {doc[_LINE]}: 'accounts' must be a list")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(raw_accounts):
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: accounts[{i}] must be a mapping with accessKey, "
                              f"secretKey, ...")
        where = f"{source} line {raw[_LINE]} (accounts[{i}])"
        try:
            account = _account(raw, source)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        if account.access_key in accounts:
            raise ConfigError(f"{where}: accessKey {account.access_key!r} appears twice")
        accounts[account.access_key] = account
    return Acl(accounts)


def _account(raw: dict[str, Any], source: str) -> Account:
    for key in raw:
        if key != _LINE and key not in ACCOUNT_FIELDS:
            raise ConfigError(f"unknown field {key!r} (want {', '.join(sorted(ACCOUNT_FIELDS))})")
    if _present(raw.get("whiteRemoteAddress")):
        log.warning("%s line %s: whiteRemoteAddress is ignored: every request must be signed",
                    source, raw[_LINE])
    admin = raw.get("admin", "")
    is_admin = admin != "" and parse_bool("admin", str(admin))
    return Account(access_key=_text(raw, "accessKey"), secret_key=_text(raw, "secretKey"),
                   admin=is_admin,
                   default_topic_perm=_perm(raw, "defaultTopicPerm"),
                   default_group_perm=_perm(raw, "defaultGroupPerm"),
                   topic_perms=_resource_perms(raw, "topicPerms"),
                   group_perms=_resource_perms(raw, "groupPerms"))


def _text(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} is required (a string)")
    return value


def _perm(raw: dict[str, Any], key: str) -> Perm:
    value = raw.get(key)
    if not _present(value):
        return Perm.DENY
    try:
        return parse_perm(str(value))
    except ConfigError as e:
        raise ConfigError(f"{key}: {e}") from None


def _resource_perms(raw: dict[str, Any], key: str) -> dict[str, Perm]:
    entries = raw.get(key) if _present(raw.get(key)) else []
    if not isinstance(entries, list):
        raise ConfigError(f"{key} must be a list of 'name=PERM' entries")
    out: dict[str, Perm] = {}
    for entry in entries:
        name, sep, perm = str(entry).partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"{key} entry {entry!r}: want 'name=PERM' (e.g. 'orders=PUB|SUB')")
        try:
            out[name] = parse_perm(perm)
        except ConfigError as e:
            raise ConfigError(f"{key} entry {entry!r}: {e}") from None
    return out


def _present(value: Any) -> bool:
    """The base loader reads an empty value (`key:`) as ""; YAML's null words mean absent too."""
    return value not in (None, "", "~", "null", "Null", "NULL")


def read_acl_file(path: str) -> Acl:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the ACL file {path}: {e}") from None
    return parse_acl(text, path)


def admin_credentials(path: str) -> tuple[str, str]:
    """(accessKey, secretKey) of the first admin account in the ACL file at `path`, for tools
    that operate a cluster they deployed (the compose drills); ("", "") when there is no file.
    A file without an admin account is an error: such a tool could not sign anything."""
    if not os.path.exists(path):
        return "", ""
    for account in read_acl_file(path).accounts.values():
        if account.admin:
            return account.access_key, account.secret_key
    raise ConfigError(f"{path} has no account with admin: true")
