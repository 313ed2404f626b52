"""The node keys of the MessagingService: defaults, parsing and refusals."""
import pytest

from cluster.node.node_config import node_config_from_properties
from store.errors import ConfigError


def test_defaults():
    c = node_config_from_properties({})
    assert (c.advertised_address, c.group_addresses) == ("", ())
    assert (c.auto_create_topic_enable, c.default_topic_queue_nums) == (True, 4)
    assert (c.access_key, c.secret_key) == ("", "")


def test_keys_are_read():
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
def test_bad_values_are_refused(props, message):
    with pytest.raises(ConfigError, match=message):
        node_config_from_properties(props)
