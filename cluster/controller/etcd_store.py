"""The controller's state in etcd: every group's GroupRecord as JSON under
`<prefix>/groups/<broker name>`, written only by the active controller.

Every save is a compare-and-swap transaction: it succeeds only if
- the leader key `<prefix>/leader` is still attached to this controller's lease (leadership.py),
  and
- each group key it writes still has the mod_revision this controller last read or wrote.
A deposed controller (its lease expired while it was paused, cut off, or slow) therefore cannot
overwrite what its successor wrote: its transaction fails and `LostLeadership` tells the
controller service to stop answering; it reloads the state when it leads again. That is what
keeps epochs from going backwards across controllers: an epoch is handed out only after the
write that records it succeeded.

A save whose outcome is unknown (a timeout after etcd applied it) leaves this store's revisions
behind; the next save then fails its compare and the controller steps down and reloads, rather
than guessing.
"""
from __future__ import annotations

import json
from typing import Callable

from cluster.controller.active_gate import NotActiveController
from cluster.controller.election import GroupRecord
from cluster.controller.etcd_client import (EtcdClient, compare_lease, compare_mod, put_op,
                                            range_op)

class LostLeadership(NotActiveController):
    """A save was refused by etcd's compare: this controller no longer holds the leader lease,
    or a group's record changed under it. Nothing of that save was written."""


def leader_key(prefix: str) -> bytes:
    return f"{prefix.rstrip('/')}/leader".encode()


class EtcdStateStore:
    """The StateStore (controller_service.py) on etcd. Owns the mod_revision and the bytes of
    every group key as this controller last read or wrote them: each group's entries are
    touched only by that group's saves (under the group's lock in the controller service);
    `load` runs before any group is served."""

    def __init__(self, client: EtcdClient, prefix: str, lease: Callable[[], int]) -> None:
        """`lease()` is this controller's current leader lease, 0 when it holds none."""
        self.client = client
        self.prefix = prefix.rstrip("/")
        self.leader_key = leader_key(prefix)
        self.groups_prefix = f"{self.prefix}/groups/".encode()
        self._lease = lease
        self._revisions: dict[str, int] = {}
        self._written: dict[str, bytes] = {}

    def group_key(self, name: str) -> bytes:
        return self.groups_prefix + name.encode()

    def load(self) -> dict[str, GroupRecord]:
        kvs, _ = self.client.range(self.groups_prefix, prefix=True)
        self._revisions.clear()
        self._written.clear()
        groups: dict[str, GroupRecord] = {}
        for kv in kvs:
            name = kv.key[len(self.groups_prefix):].decode()
            groups[name] = GroupRecord.from_json(json.loads(kv.value))
            self._revisions[name] = kv.mod_revision
            self._written[name] = kv.value
        return groups

    def save_group(self, name: str, record: GroupRecord) -> None:
        """Write one group's record if it changed since the last load or save, only if nobody
        else wrote it since and this controller still leads. Raises LostLeadership when a
        compare fails, EtcdError when etcd cannot be reached. Groups save side by side (the
        controller service holds each group's own lock); each touches only its own entries
        of `_revisions` and `_written`."""
        lease = self._lease()
        if not lease:
            raise LostLeadership("", "this controller holds no leader lease")
        data = json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")).encode()
        if data != self._written.get(name):
            self._save_chunk(lease, {name: data})

    def _save_chunk(self, lease: int, chunk: dict[str, bytes]) -> None:
        compare = [compare_lease(self.leader_key, lease)]
        compare += [compare_mod(self.group_key(n), self._revisions.get(n, 0)) for n in chunk]
        result = self.client.txn(compare,
                                 [put_op(self.group_key(n), data) for n, data in chunk.items()],
                                 [range_op(self.leader_key)])
        if not result.succeeded:
            holder = result.ranges[0][0] if result.ranges and result.ranges[0] else None
            if holder is None or holder.lease != lease:
                active = holder.value.decode() if holder is not None else ""
                raise LostLeadership(active, "its leader lease is gone")
            raise LostLeadership("", f"a group record of {sorted(chunk)} changed in etcd since "
                                     f"this controller read it")
        for name, data in chunk.items():
            self._revisions[name] = result.revision
            self._written[name] = data
