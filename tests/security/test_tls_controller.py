"""The controller serving TLS (cluster/assembly/controller_process.py with tls* keys): a node
serving TLS heartbeats it over TLS and takes the master role from it; the operator's
ControllerClient needs the CA; with tlsServerNeedClientAuth a client without a certificate is
refused."""
from __future__ import annotations

import grpc
import pytest

from cluster.client.controller_client import ControllerClient
from cluster.controller.controller_config import ControllerConfig, controller_config_from_properties
from cluster.assembly.controller_process import ControllerProcess
from cluster.security.tls import ClientTls
from common.config_values import ConfigError
from tests.support.nodes import CLUSTER_SECRET
from tests.support.waiting import wait_until


@pytest.fixture
def controller(nodes, tmp_path):
    tls = nodes.tls("controller", need_client_auth=True)
    proc = ControllerProcess(ControllerConfig(listen_address="127.0.0.1:0",
                                              store_path=str(tmp_path / "controller"), tls=tls,
                                              cluster_secret=CLUSTER_SECRET))
    proc.start()
    yield proc
    proc.stop()


def test_a_node_heartbeats_a_tls_controller_and_takes_its_role(nodes, controller):
    node = nodes.start(tls=nodes.tls("master"), controller_address=controller.address,
                       controller_heartbeat_interval_ms=100)
    wait_until(lambda: node.role.master is not None, 20, "the controller elects the node")
    assert node.link is not None and node.link.contact_age_ms() >= 0
    token = open(controller.config.token_path).read().strip()
    ca = controller.config.tls.trust_file
    operator = nodes.tls("operator")
    with ControllerClient(controller.address, token, timeout=5,
                          tls=ClientTls(ca, operator.cert_file, operator.key_file)) as client:
        [group] = client.groups().groups
    assert group.master_id == node.config.node_id
    for tls in (None, ClientTls(ca)):  # plaintext; TLS without a client certificate
        with ControllerClient(controller.address, token, timeout=3, tls=tls) as client:
            with pytest.raises(grpc.RpcError) as e:
                client.groups()
            assert e.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_node_without_tls_cannot_reach_a_tls_controller(nodes, controller):
    node = nodes.start(controller_address=controller.address, controller_heartbeat_interval_ms=100)
    wait_until(lambda: node.link is not None and node.link.note.startswith("cannot reach"), 10,
               "the link's failure")
    assert node.role.master is None


def test_controller_tls_keys_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="tlsEnable=true needs tlsServerCertPath"):
        controller_config_from_properties({"tlsEnable": "true"})
    assert not controller_config_from_properties({}).tls.enabled
