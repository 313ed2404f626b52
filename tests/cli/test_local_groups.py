"""`cluster local --groups N` without running it: the layout (names, broker names, ports), the
node configs it writes, what cluster.json readers take from a folder with and without groups,
and the refusals that start nothing."""
from __future__ import annotations

import socket

import pytest

from cluster.assembly import local_cluster
from cluster.assembly.local_layout import (MAX_GROUPS, free_base_port, group_names, layout,
                                           used_offsets)
from cluster.cli.cluster_cli import build_parser
from cluster.assembly.group_topics import parse_groups
from common.config_values import ConfigError
from store.config import parse_properties


def test_group_zero_keeps_its_names_and_ports_and_group_k_sits_100k_above():
    one = layout(10911)
    assert [(n.group, n.name, n.broker_id, n.port) for n in one] == [
        ("broker-a", "master", 0, 10911), ("broker-a", "slave1", 1, 10921),
        ("broker-a", "slave2", 2, 10931)]
    three = layout(10911, 3)
    assert three[:3] == one
    assert [(n.group, n.name, n.port) for n in three[3:]] == [
        ("broker-b", "b-master", 11011), ("broker-b", "b-slave1", 11021),
        ("broker-b", "b-slave2", 11031), ("broker-c", "c-master", 11111),
        ("broker-c", "c-slave1", 11121), ("broker-c", "c-slave2", 11131)]
    assert group_names(2) == ["broker-a", "broker-b"]
    # every port of the layout is distinct, the controller (+30) and archive (+40) included
    offsets = used_offsets(MAX_GROUPS)
    assert len(offsets) == len(set(offsets)) and 30 in offsets and 40 in offsets
    for bad in (0, MAX_GROUPS + 1):
        with pytest.raises(ValueError, match="--groups"):
            layout(10911, bad)


def test_a_free_base_port_has_every_groups_ports_free():
    base = free_base_port(2)
    for offset in used_offsets(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", base + offset))


def test_the_configs_name_each_nodes_group(tmp_path):
    written = local_cluster.write_configs(str(tmp_path), 20000, "SYNC_MASTER",
                                          str(tmp_path / "token"), groups=2)
    assert [name for name, _, _ in written] == ["master", "slave1", "slave2", "b-master",
                                                "b-slave1", "b-slave2"]
    props = {name: parse_properties(open(path).read()) for name, path, _ in written}
    assert (props["b-slave1"]["brokerName"], props["b-slave1"]["brokerId"],
            props["b-slave1"]["listenPort"]) == ("broker-b", "1", "20110")
    assert props["b-slave1"]["haMasterAddress"] == "127.0.0.1:20100"  # without a controller
    assert props["slave2"]["haMasterAddress"] == "127.0.0.1:20000"


def test_cluster_json_readers_take_one_group():
    old = {"nodes": [{"name": "master"}, {"name": "slave1"}]}  # before groups existed
    assert local_cluster.cluster_groups(old) == [""]
    assert [n["name"] for n in local_cluster.nodes_of_group(old)] == ["master", "slave1"]
    new = {"groups": ["broker-a", "broker-b"],
           "nodes": [{"name": "master", "group": "broker-a"},
                     {"name": "b-master", "group": "broker-b"}]}
    assert [n["name"] for n in local_cluster.nodes_of_group(new)] == ["master"]
    assert [n["name"] for n in local_cluster.nodes_of_group(new, "broker-b")] == ["b-master"]
    with pytest.raises(local_cluster.ClusterFolderError, match="broker-z"):
        local_cluster.nodes_of_group(new, "broker-z")


def test_refusals_start_nothing(tmp_path, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["local", "--groups", str(MAX_GROUPS + 1)])
    assert "--groups" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="needs the controller"):
        local_cluster.run_local(str(tmp_path / "c"), 20000, "SYNC_MASTER", controller=False,
                                groups=2)
    assert not (tmp_path / "c").exists()
    assert parse_groups("all", ["broker-a", "broker-b"]) == ["broker-a", "broker-b"]
    assert parse_groups("b, broker-a,b", ["broker-a", "broker-b"]) == ["broker-b", "broker-a"]
    with pytest.raises(ValueError, match="no broker group 'c'"):
        parse_groups("a,c", ["broker-a", "broker-b"])
