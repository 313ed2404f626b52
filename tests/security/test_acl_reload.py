"""The ACL in force (cluster/security/acl_reload.py, access.py): re-read when the file changes,
at most once per second of the injected clock; a broken file keeps the old ACL and says why;
signatures, the date window and the accessKey/secretKey pair. Real files, a ManualClock."""
from __future__ import annotations

import os

import pytest

from cluster.config.node_config import NodeConfig, node_config_from_properties
from cluster.security.access import AccessControl, AclConfig
from cluster.security.acl import Need, Perm
from cluster.security.acl_reload import AclSource
from cluster.security.signature import sign
from common.clock import ManualClock
from store.config import StoreConfig
from common.config_values import ConfigError
from tests.support.files import replace_file

READER = """\
accounts:
  - accessKey: reader-key
    secretKey: reader-secret
    topicPerms:
      - orders=SUB
"""
WRITER = """\
accounts:
  - accessKey: reader-key
    secretKey: reader-secret
    topicPerms:
      - orders=PUB|SUB
"""
PUB = [Need.topic("orders", Perm.PUB)]



def test_reload_on_change_at_most_once_per_second(tmp_path, caplog):
    path = tmp_path / "plain_acl.yml"
    replace_file(path, READER)
    clock = ManualClock()
    source = AclSource(str(path), clock)
    assert source.current().decide("reader-key", PUB) is not None
    replace_file(path, WRITER)
    assert source.current().decide("reader-key", PUB) is not None  # not looked at yet
    clock.advance(0.5)
    assert source.current().decide("reader-key", PUB) is not None
    clock.advance(0.5)
    assert source.current().decide("reader-key", PUB) is None and source.reloads == 1
    # a broken file: the previous ACL stays, the error is logged once and kept visible
    replace_file(path, WRITER.replace("PUB|SUB", "PUBLISH"))
    for _ in range(3):
        clock.advance(1)
        assert source.current().decide("reader-key", PUB) is None
    assert "PUBLISH" in source.problem and "line 2" in source.problem
    assert sum("previous ACL stays in force" in r.message for r in caplog.records) == 1
    # deleting the file is no way around the ACL either
    os.remove(path)
    clock.advance(1)
    assert source.current().decide("reader-key", PUB) is None
    assert "cannot read" in source.problem
    # a good file again: in force, problem cleared
    replace_file(path, READER)
    clock.advance(1)
    assert source.current().decide("reader-key", PUB) is not None
    assert source.problem == "" and source.reloads == 2


def test_same_size_rewrite_in_place_is_seen(tmp_path):
    """A change of mtime alone (same size, same inode) is enough."""
    path = tmp_path / "plain_acl.yml"
    path.write_text(READER.replace("SUB", "PUB"))
    clock = ManualClock()
    source = AclSource(str(path), clock)
    assert source.current().decide("reader-key", PUB) is None
    path.write_text(READER)  # same length: PUB -> SUB
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    clock.advance(1)
    assert source.current().decide("reader-key", PUB) is not None


def config(root, **props) -> NodeConfig:
    base = {"storePathRootDir": str(root)}
    return node_config_from_properties({**base, **{k: str(v) for k, v in props.items()}})


def test_access_control_signature_date_and_permissions(tmp_path):
    os.makedirs(tmp_path / "config")
    replace_file(tmp_path / "config" / "plain_acl.yml", READER)  # the default aclFile
    clock = ManualClock(1_790_000_000_000)
    access = AccessControl(lambda: config(tmp_path, aclEnable="true"), clock)
    now_s = clock.now_ms() / 1000
    signed = sign("reader-key", "reader-secret", now_s=now_s)
    assert access.check(signed, [Need.topic("orders", Perm.SUB)]) is None
    refusal = access.check(signed, PUB)
    assert not refusal.unauthorized and "lacks PUB on topic 'orders'" in refusal.message
    wrong = access.check(sign("reader-key", "not-the-secret", now_s=now_s), [])
    assert wrong.unauthorized and "does not match" in wrong.message
    assert access.check(sign("someone-key", "reader-secret", now_s=now_s), []).unauthorized
    assert access.check([], []).unauthorized  # unsigned
    stale = access.check(sign("reader-key", "reader-secret", now_s=now_s - 901), [])
    assert stale.unauthorized and "901 s behind" in stale.message
    assert access.admin_refusal(signed) == "user 'reader-key' is not an admin (admin: true in " \
                                           "the ACL file)"


def test_window_is_configurable_and_the_node_pair_holds_everything(tmp_path):
    acl_file = tmp_path / "acl.yml"
    replace_file(acl_file, READER)
    clock = ManualClock(1_790_000_000_000)
    c = config(tmp_path, aclEnable="true", aclFile=acl_file, aclDateTimeWindowSeconds=5,
               accessKey="node-key", secretKey="node-secret")
    access = AccessControl(lambda: c, clock)
    now_s = clock.now_ms() / 1000
    assert access.check(sign("reader-key", "reader-secret", now_s=now_s - 5), []) is None
    assert access.check(sign("reader-key", "reader-secret", now_s=now_s - 6), []).unauthorized
    assert access.check(sign("node-key", "node-secret", now_s=now_s), PUB) is None
    assert access.admin_refusal(sign("node-key", "node-secret", now_s=now_s))  # not an admin


def test_acl_off(tmp_path):
    clock = ManualClock()
    open_node = AccessControl(lambda: config(tmp_path), clock)
    assert open_node.check([], PUB) is None
    assert "ACL is off" in open_node.admin_refusal([])
    pair_only = AccessControl(lambda: config(tmp_path, accessKey="ak", secretKey="sk"), clock)
    assert pair_only.check([], PUB).unauthorized
    assert pair_only.check(sign("ak", "sk", now_s=clock.now_ms() / 1000), PUB) is None


def test_config_keys(tmp_path):
    assert config(tmp_path).acl == AclConfig()
    c = config(tmp_path, aclEnable="TRUE", aclFile="/etc/acl.yml", aclDateTimeWindowSeconds=60)
    assert c.acl == AclConfig(enable=True, file="/etc/acl.yml", date_time_window_s=60)
    assert AclConfig().path("/data") == os.path.join("/data", "config", "plain_acl.yml")
    for bad, words in (({"aclEnable": "yes"}, "aclEnable"),
                       ({"aclDateTimeWindowSeconds": "0"}, "1..604800"),
                       ({"aclDateTimeWindowSeconds": "15m"}, "must be an integer")):
        with pytest.raises(ConfigError, match=words):
            config(tmp_path, **bad)
    # ACL on without a valid file: the node does not start
    with pytest.raises(ConfigError, match="cannot read the ACL file"):
        AccessControl(lambda: NodeConfig(acl=AclConfig(enable=True), store=StoreConfig(
            store_path_root_dir=str(tmp_path / "none"))), ManualClock())
