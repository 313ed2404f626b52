"""Node settings from broker.conf keys: identity, role rules, token options, the
MessagingService keys and the transaction keys: defaults, parsing and refusals."""
import os

import pytest

from cluster.config.node_config import NodeConfig, load_node_config, node_config_from_properties
from store.config import StoreConfig
from common.config_values import ConfigError
from store.layout import ADMIN_TOKEN_FILE, CONFIG_DIR

SECRET = "0123456789abcdef"


def test_broker_conf_keys(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerClusterName=C1\nbrokerName=b1\nbrokerId=2\nbrokerRole=SLAVE\n"
                    "clusterSecret=0123456789abcdef\n"
                    f"storePathRootDir={tmp_path}/s\nhaMasterAddress=127.0.0.1:10911\n"
                    "listenPort=10921\nslaveTimeout=1500\nnamesrvAddr=ignored:9876\n")
    c = load_node_config(str(conf))
    assert (c.cluster_name, c.broker_name, c.broker_id, c.node_id) == ("C1", "b1", 2, "b1:2")
    assert c.store.is_slave and c.store.ha_master_address == "127.0.0.1:10911"
    assert c.store.slave_timeout == 1500 and c.listen_address == "127.0.0.1:10921"
    assert c.default_token_path == os.path.join(f"{tmp_path}/s", CONFIG_DIR, ADMIN_TOKEN_FILE)


@pytest.mark.parametrize("props, message", [
    ({"brokerRole": "SLAVE", "brokerId": "1"}, "haMasterAddress"),
    ({"controllerAddr": "nohost", "clusterSecret": SECRET}, "controllerAddr"),
    ({"brokerRole": "SLAVE", "haMasterAddress": "127.0.0.1:1"}, "clusterSecret"),
    ({"controllerAddr": "127.0.0.1:1"}, "clusterSecret"),
    ({"clusterSecret": SECRET, "clusterSecretFile": "/x"}, "clusterSecret"),
    ({"controllerHeartbeatInterval": "10"}, "controllerHeartbeatInterval"),
    ({"brokerId": "x"}, "brokerId"),
    ({"brokerId": "-1"}, "brokerId"),
    ({"brokerName": "a b"}, "broker_name"),
    ({"adminToken": "t", "adminTokenFile": "/f"}, "not both"),
    ({"brokerRole": "MASTER"}, "brokerRole"),
    ({"serverEventLoop": "tokio"}, "serverEventLoop='tokio': want uvloop or asyncio"),
])
def test_bad_settings_are_refused_with_the_key(props, message):
    with pytest.raises(ConfigError, match=message):
        node_config_from_properties(props)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_node_config(str(tmp_path / "nope.conf"))


def test_defaults():
    c = NodeConfig(store=StoreConfig(store_path_root_dir="/tmp/x"))
    assert (c.cluster_name, c.broker_name, c.broker_id) == ("DefaultCluster", "broker-a", 0)
    assert c.store.broker_role == "ASYNC_MASTER"
    assert c.server_event_loop == "uvloop"
    assert node_config_from_properties({"serverEventLoop": "asyncio"}).server_event_loop == "asyncio"


# -- the MessagingService keys -------------------------------------------------------------------
def test_messaging_defaults():
    c = node_config_from_properties({})
    assert (c.advertised_address, c.group_addresses) == ("", ())
    assert (c.auto_create_topic_enable, c.default_topic_queue_nums) == (True, 4)
    assert (c.access_key, c.secret_key) == ("", "")


def test_messaging_keys_are_read():
    c = node_config_from_properties({
        "advertisedAddress": "10.0.0.1:8081", "groupAddresses": " 10.0.0.1:8081, 10.0.0.2:8081 ,",
        "autoCreateTopicEnable": "FALSE", "defaultTopicQueueNums": "8",
        "accessKey": "ak", "secretKey": "sk"})
    assert c.advertised_address == "10.0.0.1:8081"
    assert c.group_addresses == ("10.0.0.1:8081", "10.0.0.2:8081")
    assert (c.auto_create_topic_enable, c.default_topic_queue_nums) == (False, 8)
    assert (c.access_key, c.secret_key) == ("ak", "sk")


@pytest.mark.parametrize("props, message", [
    ({"advertisedAddress": "broker.example:8081"}, "advertisedAddress"),
    ({"advertisedAddress": "10.0.0.1"}, "advertisedAddress"),
    ({"advertisedAddress": "[::1]:8081"}, "advertisedAddress"),
    ({"groupAddresses": "10.0.0.1:8081,10.0.0.2:99999"}, "groupAddresses"),
    ({"autoCreateTopicEnable": "yes"}, "autoCreateTopicEnable"),
    ({"defaultTopicQueueNums": "0"}, "defaultTopicQueueNums"),
    ({"defaultTopicQueueNums": "four"}, "defaultTopicQueueNums"),
    ({"accessKey": "ak"}, "secretKey"),
])
def test_bad_messaging_values_are_refused(props, message):
    with pytest.raises(ConfigError, match=message):
        node_config_from_properties(props)


# -- the transaction keys ------------------------------------------------------------------------
def test_transaction_keys():
    c = node_config_from_properties({})
    assert (c.transaction_timeout_ms, c.transaction_check_max,
            c.transaction_check_interval_ms) == (6000, 15, 60000)
    c = node_config_from_properties({"transactionTimeOut": "1000", "transactionCheckMax": "3",
                                     "transactionCheckInterval": "500"})
    assert (c.transaction_timeout_ms, c.transaction_check_max,
            c.transaction_check_interval_ms) == (1000, 3, 500)
    for key, value in (("transactionTimeOut", "-1"), ("transactionCheckMax", "0"),
                       ("transactionCheckInterval", "5"), ("transactionCheckMax", "x")):
        with pytest.raises(ConfigError, match=key):
            node_config_from_properties({key: value})


def test_the_role_is_not_tied_to_the_broker_id():
    """A node with brokerId 0 can follow another master (the old master rejoining after a
    failover), and under a controller a slave needs no haMasterAddress."""
    c = node_config_from_properties({"brokerId": "0", "brokerRole": "SLAVE", "clusterSecret": SECRET,
                                     "haMasterAddress": "127.0.0.1:10921"})
    assert c.store.is_slave and c.broker_id == 0
    c = node_config_from_properties({"brokerId": "1", "brokerRole": "SLAVE",
                                     "controllerAddr": "127.0.0.1:9878", "clusterSecret": SECRET,
                                     "brokerElectionPriority": "3"})
    assert c.controller_address == "127.0.0.1:9878" and c.election_priority == 3
    assert c.controller_heartbeat_interval_ms == 500
