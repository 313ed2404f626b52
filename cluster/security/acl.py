"""The access control list: users, their secrets and their PUB/SUB permissions, and the one
decision "may this user do this to that resource" (pure: no I/O, no clock).

Semantics follow RocketMQ's plain ACL (PlainPermissionManager, acl/common/Permission):
- A resource is a topic or a consumer group. A retry or dead-letter topic (`%RETRY%<g>`,
  `%DLQ%<g>`) is checked as the group <g> (RocketMQ keys group permissions by the retry topic).
- A user's permission on a resource is its entry in topicPerms / groupPerms when there is one,
  else its defaultTopicPerm / defaultGroupPerm; a missing default is DENY.
- A need of PUB or SUB is met when the permission includes it; a need of "PUB or SUB"
  (QueryRoute) when the permission includes either.
- `admin: true` users hold every permission on every resource (and may call the Admin API).
- Unknown users are refused as UNAUTHORIZED; a known user without the permission as FORBIDDEN
  (deny by default).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from common.config_values import ConfigError

from store.validation import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX


class Perm(enum.IntFlag):
    """RocketMQ's DENY / PUB / SUB / PUB|SUB."""
    DENY = 0
    PUB = 1
    SUB = 2

    @property
    def text(self) -> str:
        return {0: "DENY", 1: "PUB", 2: "SUB", 3: "PUB|SUB"}[int(self)]


PERM_WORDS = {"DENY": Perm.DENY, "PUB": Perm.PUB, "SUB": Perm.SUB,
              "PUB|SUB": Perm.PUB | Perm.SUB, "SUB|PUB": Perm.PUB | Perm.SUB}


def parse_perm(text: str) -> Perm:
    """Strict, unlike RocketMQ (which takes an unknown word as DENY without a word): a typo in
    an ACL file is an error the operator sees, never a silent change of permissions."""
    word = text.strip().upper().replace(" ", "")
    if word not in PERM_WORDS:
        raise ConfigError(f"permission {text!r} must be DENY, PUB, SUB or PUB|SUB")
    return PERM_WORDS[word]


class Kind(str, enum.Enum):
    TOPIC = "topic"
    GROUP = "group"


@dataclass(frozen=True)
class Need:
    """One permission a call needs: `perm` on the resource (kind, name); with `either` a
    permission holding PUB or SUB suffices (RocketMQ's ANY)."""
    kind: Kind
    name: str
    perm: Perm
    either: bool = False

    @staticmethod
    def topic(name: str, perm: Perm) -> "Need":
        """A need on a topic; a retry/DLQ topic becomes the need on its group."""
        for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
            if name.startswith(prefix) and len(name) > len(prefix):
                return Need(Kind.GROUP, name[len(prefix):], perm)
        return Need(Kind.TOPIC, name, perm)

    @staticmethod
    def group(name: str, perm: Perm = Perm.SUB) -> "Need":
        return Need(Kind.GROUP, name, perm)

    @property
    def words(self) -> str:
        return "PUB or SUB" if self.either else self.perm.text


@dataclass(frozen=True)
class Account:
    """One user of plain_acl.yml."""
    access_key: str
    secret_key: str
    admin: bool = False
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: Mapping[str, Perm] = field(default_factory=dict)
    group_perms: Mapping[str, Perm] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ConfigError("an account needs a non-empty accessKey and secretKey")
        # RocketMQ's rule (AclConstants *_KEY_MIN_LENGTH): longer than 6 characters.
        for name, value in (("accessKey", self.access_key), ("secretKey", self.secret_key)):
            if len(value) <= 6:
                raise ConfigError(f"{name} must be longer than 6 characters")
            if any(ch.isspace() or ch == "," for ch in value):
                raise ConfigError(f"{name} must not contain spaces or ','")
        object.__setattr__(self, "topic_perms", MappingProxyType(dict(self.topic_perms)))
        object.__setattr__(self, "group_perms", MappingProxyType(dict(self.group_perms)))

    def owned(self, kind: Kind, name: str) -> Perm:
        if kind is Kind.TOPIC:
            return self.topic_perms.get(name, self.default_topic_perm)
        return self.group_perms.get(name, self.default_group_perm)

    def allows(self, need: Need) -> bool:
        if self.admin:
            return True
        owned = self.owned(need.kind, need.name)
        if need.either:
            return owned != Perm.DENY
        return (owned & need.perm) == need.perm


@dataclass(frozen=True)
class Refusal:
    """Why a call may not proceed: `unauthorized` (who is calling is not proven) or not
    (FORBIDDEN: the user is known and lacks a permission)."""
    unauthorized: bool
    message: str


@dataclass(frozen=True)
class Acl:
    """Users by access key. Immutable: a reload builds a new Acl and swaps the reference."""
    accounts: Mapping[str, Account] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "accounts", MappingProxyType(dict(self.accounts)))

    def secret_of(self, access_key: str) -> str | None:
        account = self.accounts.get(access_key)
        return None if account is None else account.secret_key

    def decide(self, access_key: str, needs: tuple[Need, ...] | list[Need]) -> Refusal | None:
        """None when `access_key` holds every need, else the refusal naming the first missing
        permission (deny by default: an unknown user, resource or permission is refused)."""
        account = self.accounts.get(access_key)
        if account is None:
            return Refusal(True, f"unknown access key {access_key!r}")
        for need in needs:
            if not account.allows(need):
                return Refusal(False, f"user {access_key!r} lacks {need.words} on "
                                      f"{need.kind.value} {need.name!r}")
        return None

    def is_admin(self, access_key: str) -> bool:
        account = self.accounts.get(access_key)
        return account is not None and account.admin
