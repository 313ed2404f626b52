"""TLS on a real node's port (cluster/security/tls.py wired into cluster/assembly/node.py): a
plaintext client and a client trusting another CA fail, a client trusting the cluster's CA
works; with tlsServerNeedClientAuth a client without a certificate, or with another CA's, is
refused at the handshake and one with a cluster certificate works; a master and a slave both on
TLS replicate; the peer's verified certificate is visible to a servicer; bad settings name
their key."""
from __future__ import annotations

import os
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cluster.client.admin_client import AdminClient
from cluster.config.node_config import node_config_from_properties
from cluster.security.cert_authority import ensure_ca, ensure_leaf
from cluster.security.tls import (ClientTls, TlsSettings, add_port, open_channel, peer_identity,
                                  tls_settings_from_properties)
from common.config_values import ConfigError
from proto import admin_pb2 as apb
from tests.support.nodes import TOKEN, settle
from tests.support.waiting import wait_until

SERVING = health_pb2.HealthCheckResponse.SERVING


def check(address: str, tls: ClientTls | None, timeout: float = 5) -> int:
    with open_channel(address, tls) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                          timeout=timeout).status


def other_ca(tmp_path) -> tuple[ClientTls, ClientTls]:
    """(trusting another CA, presenting a certificate of another CA and trusting ours)."""
    folder = str(tmp_path / "other")
    ca = ensure_ca(folder, "other")
    leaf = ensure_leaf(folder, "intruder", ca)
    return ClientTls(ca.cert_path), leaf


def refused(address: str, tls: ClientTls | None) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        check(address, tls, timeout=3)
    assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    return e.value


def test_a_tls_node_serves_only_clients_that_trust_its_ca(nodes, tmp_path):
    node = nodes.start(tls=nodes.tls("master"))
    ca = node.config.tls.trust_file
    assert check(node.address, ClientTls(ca)) == SERVING
    refused(node.address, None)  # plaintext: the TLS server never answers it
    refused(node.address, other_ca(tmp_path)[0])  # the node's certificate is not theirs
    # the Admin API (token and TLS) and the MessagingService go through the same port
    assert nodes.admin(node).status().role == "ASYNC_MASTER"
    with AdminClient(node.address, TOKEN, timeout=3) as plain:
        with pytest.raises(grpc.RpcError) as e:
            plain.status()
        assert e.value.code() is grpc.StatusCode.UNAVAILABLE
    conn = nodes.connect(node)
    assert conn.readable_queues("TlsTopic") == [0, 1, 2, 3]


def test_need_client_auth_refuses_clients_without_a_cluster_certificate(nodes, tmp_path):
    node = nodes.start(tls=nodes.tls("master", need_client_auth=True))
    ca = node.config.tls.trust_file
    operator = nodes.tls("operator")  # another certificate of the cluster's CA
    assert check(node.address, ClientTls(ca, operator.cert_file, operator.key_file)) == SERVING
    refused(node.address, ClientTls(ca))  # no client certificate
    intruder = other_ca(tmp_path)[1]
    refused(node.address, ClientTls(ca, intruder.cert_path, intruder.key_path))
    refused(node.address, None)


def test_master_and_slave_replicate_over_tls(nodes):
    master = nodes.start(role="SYNC_MASTER", tls=nodes.tls("master", need_client_auth=True))
    # the slave calls its master with its own certificate (the master needs one)
    slave = nodes.slave(master, tls=nodes.tls("slave", need_client_auth=True))
    assert slave.config.node_id in master.role.master.tracker.in_sync_ids()
    # a SYNC_MASTER answers PUT_OK only once the slave acked the write over TLS
    sent = nodes.admin(master).send([apb.Message(topic="Replicated", body=b"over tls")])
    assert sent.status == "PUT_OK"
    status = nodes.admin(slave).status()
    assert status.master_connected and not status.replication_error
    settle(slave)
    assert slave.store.max_phy_offset() == master.store.max_phy_offset() > 0


def test_a_slave_without_the_masters_ca_does_not_replicate(nodes, tmp_path):
    master = nodes.start(tls=nodes.tls("master"))
    folder = str(tmp_path / "elsewhere")
    ca = ensure_ca(folder, "elsewhere")
    leaf = ensure_leaf(folder, "slave", ca)
    slave = nodes.start("slave", role="SLAVE", broker_id=1, master_address=master.address,
                        tls=TlsSettings(True, leaf.cert_path, leaf.key_path, ca.cert_path))
    wait_until(lambda: slave._slave is not None and slave._slave.last_error, 10,
               "the slave's replication error")
    assert not slave._slave.connected
    assert "CERTIFICATE_VERIFY_FAILED" in slave._slave.last_error, slave._slave.last_error
    assert not master.role.master.tracker.in_sync_ids()


def test_a_servicer_sees_the_verified_client_certificate(tmp_path):
    folder = str(tmp_path)
    ca = ensure_ca(folder, "c")
    server_files, client_files = ensure_leaf(folder, "srv", ca), ensure_leaf(folder, "slave1", ca)
    seen = []

    class Health(health.HealthServicer):
        def Check(self, request, context):
            seen.append(peer_identity(context))
            return health_pb2.HealthCheckResponse(status=SERVING)

    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
    settings = TlsSettings(True, server_files.cert_path, server_files.key_path, ca.cert_path,
                           need_client_auth=True)
    port = add_port(server, "127.0.0.1:0", settings)
    server.start()
    try:
        tls = ClientTls(ca.cert_path, client_files.cert_path, client_files.key_path)
        assert check(f"127.0.0.1:{port}", tls) == SERVING
    finally:
        server.stop(None)
    assert seen[0]["x509_common_name"] == ["slave1"]
    assert seen[0]["transport_security_type"] == ["ssl"]


def test_bad_tls_settings_name_their_key(tmp_path):
    folder = str(tmp_path)
    ca = ensure_ca(folder, "c")
    a, b = ensure_leaf(folder, "a", ca), ensure_leaf(folder, "b", ca)
    good = {"tlsEnable": "true", "tlsServerCertPath": a.cert_path, "tlsServerKeyPath": a.key_path,
            "tlsServerTrustCertPath": ca.cert_path}
    assert node_config_from_properties(good).tls == TlsSettings(True, a.cert_path, a.key_path,
                                                                ca.cert_path)
    assert not node_config_from_properties({}).tls.enabled
    cases = [
        ({"tlsEnable": "yes"}, "tlsEnable='yes': must be true or false"),
        ({"tlsServerCertPath": ""}, "tlsEnable=true needs tlsServerCertPath"),
        ({"tlsServerKeyPath": ""}, "tlsEnable=true needs tlsServerKeyPath"),
        ({"tlsServerCertPath": os.path.join(folder, "missing.pem")},
         "tlsServerCertPath=.*missing.pem: cannot read it"),
        ({"tlsServerKeyPath": b.key_path}, "tlsServerKeyPath=.*b.key: the key does not belong"),
        ({"tlsServerTrustCertPath": "", "tlsServerNeedClientAuth": "true"},
         "tlsServerNeedClientAuth=true needs tlsServerTrustCertPath"),
        ({"tlsServerKeyPath": a.cert_path}, "tlsServerKeyPath=.*not an unencrypted PEM"),
    ]
    for change, message in cases:
        with pytest.raises(ConfigError, match=message):
            tls_settings_from_properties({**good, **change})
    with pytest.raises(ConfigError, match="needs tlsEnable=true"):
        tls_settings_from_properties({"tlsServerNeedClientAuth": "true"})


def test_a_client_of_several_tls_nodes_verifies_each(nodes):
    """One target of several IPv4 addresses (the official clients' form): each node's
    certificate is checked against the first address's IP, which all of them name."""
    a, b = nodes.start("a", tls=nodes.tls("a")), nodes.start("b", tls=nodes.tls("b"))
    conn = nodes.connect(f"{a.address};{b.address}", tls=nodes.client_tls(a), request_timeout=5)
    assert conn.readable_queues("Several") == [0, 1, 2, 3]
    nodes.stop(sorted((a, b), key=lambda n: n.address)[0])  # pick-first moves to the other
    assert conn.readable_queues("Several") == [0, 1, 2, 3]
