"""controller.conf keys of controllers sharing their state in etcd: parsed, validated, and
absent by default (the single controller with its file state)."""
from __future__ import annotations

import pytest

from cluster.controller.controller_config import controller_config_from_properties
from common.config_values import ConfigError


def test_without_endpoints_the_state_stays_in_a_file():
    config = controller_config_from_properties({})
    assert not config.etcd.enabled
    assert (config.etcd.prefix, config.etcd.lease_seconds) == ("/rmqstore", 3)


def test_etcd_keys():
    config = controller_config_from_properties({
        "controllerEtcdEndpoints": "http://10.0.0.5:2379; http://10.0.0.6:2379,http://10.0.0.7:2379",
        "controllerEtcdPrefix": "/prod", "controllerEtcdLeaseSeconds": "5",
        "controllerAdvertisedAddress": "10.0.0.9:9878"})
    assert config.etcd.endpoints == ("http://10.0.0.5:2379", "http://10.0.0.6:2379",
                                     "http://10.0.0.7:2379")
    assert (config.etcd.prefix, config.etcd.lease_seconds) == ("/prod", 5)
    assert config.advertised_address == "10.0.0.9:9878"


@pytest.mark.parametrize("key,value,message", [
    ("controllerEtcdEndpoints", "https://e:2379", "not an http:// URL"),
    ("controllerEtcdEndpoints", "e:2379", "not an http:// URL"),
    ("controllerEtcdPrefix", "rmq/", "want /name"),
    ("controllerEtcdLeaseSeconds", "1", "must be 2..60"),
    ("controllerAdvertisedAddress", "nohost", "want host:port"),
])
def test_bad_values_are_refused(key, value, message):
    with pytest.raises(ConfigError, match=message):
        controller_config_from_properties({key: value})
