"""Who may call the client API: the signature check and the ACL decision together.

broker.conf keys (RocketMQ's `aclEnable`; the others are ours): ACL_KEY_DOCS below, and
    accessKey, secretKey      (older keys, still honoured) one user with every permission on
                              every resource, but not the Admin API. Alone (aclEnable=false)
                              every call must be signed by it. With ACL on it is the nodes' own
                              user: a slave signs with it what it sends on nobody's behalf (the
                              Telemetry relay of transaction check-backs), so set the same pair
                              on every node of the group.
With neither ACL nor the pair, nothing is checked.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from common.config_values import ConfigError, KeyDoc, prop_bool, prop_int

from cluster.security.signature import Metadata, verify
from cluster.security.acl import Need, Refusal
from cluster.security.acl_reload import AclSource

if TYPE_CHECKING:
    from common.clock import Clock

    from cluster.config.node_config import NodeConfig

# AclConfig's keys and what each means (the docs' configuration reference).
ACL_KEY_DOCS = {
    "aclEnable": KeyDoc("true: every MessagingService call must be signed by a user of the ACL "
                        "file and hold the permissions its method needs (deny by default); the "
                        "file is re-read when it changes (acl_reload.py).", field="enable"),
    "aclFile": KeyDoc("The ACL in RocketMQ's plain_acl.yml format (acl_file.py); empty: "
                      "<storePathRootDir>/config/plain_acl.yml.", field="file"),
    "aclDateTimeWindowSeconds": KeyDoc("How far a request's signed x-mq-date-time may be from "
                                       "the node's clock, either way. Only the date is signed, "
                                       "so this bounds replays. The official Python client "
                                       "writes its local time with a \"Z\": run it with "
                                       "TZ=UTC, or widen the window past the zone offset.",
                                       "s", field="date_time_window_s"),
}
ACL_KEYS = frozenset(ACL_KEY_DOCS)
DEFAULT_WINDOW_SECONDS = 15 * 60
DEFAULT_ACL_FILE = os.path.join("config", "plain_acl.yml")  # under storePathRootDir


@dataclass(frozen=True)
class AclConfig:
    """A node's ACL keys: whether access control is on, the plain_acl.yml file, and how far
    a request's signed date may be from now."""

    enable: bool = False
    file: str = ""  # "" -> <storePathRootDir>/config/plain_acl.yml
    date_time_window_s: int = DEFAULT_WINDOW_SECONDS

    def __post_init__(self) -> None:
        if not 1 <= self.date_time_window_s <= 7 * 24 * 3600:
            raise ConfigError(f"aclDateTimeWindowSeconds={self.date_time_window_s}: must be "
                              f"1..604800")

    def path(self, store_root: str) -> str:
        return self.file or os.path.join(store_root, DEFAULT_ACL_FILE)


def acl_config_from_properties(props: dict[str, str]) -> AclConfig:
    return AclConfig(enable=prop_bool(props, "aclEnable", False),
                     file=props.get("aclFile", "").strip(),
                     date_time_window_s=prop_int(props, "aclDateTimeWindowSeconds",
                                                 DEFAULT_WINDOW_SECONDS))


class AccessControl:
    """Decides each call from the node's current config (read through `config`, so a config
    change applies to the next call) and the ACL file. Owns the AclSource of the configured
    path; `_lock` guards replacing it when the path changes."""

    def __init__(self, config: Callable[[], "NodeConfig"], clock: "Clock") -> None:
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self._source: AclSource | None = None
        self._source_for()  # with ACL on, a missing or broken file stops the start here

    def _source_for(self) -> AclSource | None:
        c = self.config()
        if not c.acl.enable:
            return None
        path = c.acl.path(c.store.store_path_root_dir)
        source = self._source
        if source is None or source.path != path:
            with self._lock:
                if self._source is None or self._source.path != path:
                    try:
                        self._source = AclSource(path, self.clock)
                    except ConfigError as e:
                        raise ConfigError(f"aclEnable=true needs a valid ACL file (aclFile, "
                                          f"default <storePathRootDir>/{DEFAULT_ACL_FILE}): "
                                          f"{e}") from None
                source = self._source
        return source

    @property
    def problem(self) -> str:
        """Why the ACL file on disk is not the one in force ("" when it is, or ACL is off)."""
        source = self._source if self.config().acl.enable else None
        return source.problem if source is not None else ""

    @property
    def active(self) -> bool:
        """Whether calls are checked at all (ACL on, or the node's accessKey pair set)."""
        c = self.config()
        return c.acl.enable or bool(c.access_key)

    def check(self, metadata: Metadata | None, needs: Sequence[Need]) -> Refusal | None:
        """None when the call may proceed, else the refusal (UNAUTHORIZED or FORBIDDEN)."""
        who = self.authenticate(metadata)
        return who if isinstance(who, Refusal) else self.permit(who, needs)

    def authenticate(self, metadata: Metadata | None) -> str | Refusal:
        """The proven access key ("" when nothing is checked), or an UNAUTHORIZED refusal."""
        c = self.config()
        source = self._source_for()
        if source is None and not c.access_key:
            return ""
        acl = source.current() if source is not None else None

        def secret_of(access_key: str) -> str | None:
            if c.access_key and access_key == c.access_key:
                return c.secret_key
            return acl.secret_of(access_key) if acl is not None else None

        verified = verify(metadata, secret_of, self.clock.now_ms(), c.acl.date_time_window_s)
        return Refusal(True, verified.refusal) if verified.refusal else verified.access_key

    def permit(self, access_key: str, needs: Sequence[Need]) -> Refusal | None:
        """The ACL's decision for an authenticated `access_key` (a long stream's later
        requests are decided with the key proven when it opened: its date ages)."""
        c = self.config()
        source = self._source_for()
        if source is None or not access_key or access_key == c.access_key:
            return None  # nothing checked, or the node pair: every permission
        return source.current().decide(access_key, needs)

    def admin_refusal(self, metadata: Metadata | None) -> str | None:
        """None when the call is signed by an ACL user with `admin: true`, else why not."""
        c = self.config()
        source = self._source_for()
        if source is None:
            return "ACL is off (aclEnable=false): use the admin token"
        acl = source.current()
        verified = verify(metadata, acl.secret_of, self.clock.now_ms(), c.acl.date_time_window_s)
        if verified.refusal:
            return verified.refusal
        if not acl.is_admin(verified.access_key):
            return f"user {verified.access_key!r} is not an admin (admin: true in the ACL file)"
        return None
