"""The HTTP endpoints (/metrics, the console and its API, the archive's JSON API) of real servers
on 127.0.0.1 with TLS on (cluster/metrics/exposition.py, cluster/security/tls.py
http_ssl_context): HTTPS with the process's own certificate, answered to a client that trusts
the cluster's CA; the console's token still required; refused to a plain-HTTP client, to one
without the CA and to one that offers only TLS 1.1; with tlsServerNeedClientAuth a client
certificate of the CA is needed. A client stalling its handshake delays no other client.
Without TLS the endpoints stay plain HTTP."""
from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.error
import urllib.request
import warnings

import pytest

from cluster.archive.archive_config import ArchiveConfig
from cluster.assembly.archive_process import ArchiveProcess
from cluster.assembly.controller_process import ControllerProcess
from cluster.controller.controller_config import ControllerConfig
from cluster.security.cert_authority import ensure_ca, ensure_leaf
from cluster.security.tls import TlsSettings, http_ssl_context
from tests.support.nodes import CLUSTER_SECRET, TOKEN
from tests.support.waiting import wait_until

# what a plain-HTTP request, or a refused handshake, raises in urllib
REFUSED = (OSError, http.client.HTTPException)


def trusting(ca_file: str, cert=None) -> ssl.SSLContext:
    """A client context that trusts `ca_file` (and presents `cert`, a CertFiles)."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert is not None:
        context.load_cert_chain(cert.cert_path, cert.key_path)
    return context


def get(url: str, context: ssl.SSLContext | None = None, token: str = "") -> tuple[int, bytes]:
    """(status, body) of a GET; an HTTP error status is returned, a refusal raised."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def refused(url: str, context: ssl.SSLContext | None = None) -> Exception:
    with pytest.raises(REFUSED) as e:
        get(url, context)
    return e.value


def negotiated(address: str, context: ssl.SSLContext) -> str:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return tls.version() or ""


def test_a_tls_node_serves_metrics_and_console_over_https_only(nodes, tmp_path):
    settings = nodes.tls("master")
    node = nodes.start(tls=settings, metrics_listen_address="127.0.0.1:0")
    assert node.metrics is not None and node.metrics.scheme == "https"
    base, ca = f"https://{node.metrics.address}", trusting(settings.trust_file)

    status, body = get(f"{base}/metrics", ca)
    assert status == 200 and b'rmqstore_role{role="ASYNC_MASTER"} 1.0' in body
    status, body = get(f"{base}/", ca)
    assert status == 200 and b"<title>rmqstore console</title>" in body
    # the console's API still wants the admin token
    assert get(f"{base}/api/node", ca)[0] == 401
    assert get(f"{base}/api/node", ca, token="wrong")[0] == 401
    status, body = get(f"{base}/api/node", ca, token=TOKEN)
    assert status == 200 and json.loads(body)["role"] == "ASYNC_MASTER"
    assert negotiated(node.metrics.address, ca) in ("TLSv1.2", "TLSv1.3")

    refused(f"http://{node.metrics.address}/metrics")  # plain HTTP to the TLS port
    e = refused(f"{base}/metrics", ssl.create_default_context())  # the system's roots only
    assert "CERTIFICATE_VERIFY_FAILED" in str(e)
    other = ensure_ca(str(tmp_path / "other"), "other")
    e = refused(f"{base}/metrics", trusting(other.cert_path))  # another cluster's CA
    assert "CERTIFICATE_VERIFY_FAILED" in str(e)
    # a client that offers TLS 1.1 at most (its own floor lowered): the server's alert
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSVersion.TLSv1_1 is
        old = trusting(settings.trust_file)
        old.set_ciphers("DEFAULT:@SECLEVEL=0")
        old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION"):
        negotiated(node.metrics.address, old)
    # none of the refusals stopped the server
    assert get(f"{base}/metrics", ca)[0] == 200


def test_a_stalled_handshake_delays_no_other_client(nodes):
    settings = nodes.tls("master")
    node = nodes.start(tls=settings, metrics_listen_address="127.0.0.1:0")
    host, _, port = node.metrics.address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5):  # connects, says nothing
        started = time.monotonic()
        assert get(f"https://{node.metrics.address}/metrics",
                   trusting(settings.trust_file))[0] == 200
        assert time.monotonic() - started < 3


def test_with_need_client_auth_https_needs_a_certificate_of_the_ca(nodes, tmp_path):
    settings = nodes.tls("master", need_client_auth=True)
    node = nodes.start(tls=settings, metrics_listen_address="127.0.0.1:0")
    url = f"https://{node.metrics.address}/metrics"
    refused(url, trusting(settings.trust_file))  # no client certificate
    folder = str(tmp_path / "other")
    intruder = ensure_leaf(folder, "intruder", ensure_ca(folder, "other"))
    refused(url, trusting(settings.trust_file, intruder))  # one of another CA
    operator = ensure_leaf(str(tmp_path / "tls"), "operator",
                           ensure_ca(str(tmp_path / "tls"), "test"))
    assert get(url, trusting(settings.trust_file, operator))[0] == 200


def test_a_tls_controller_serves_its_metrics_and_the_cluster_console_over_https(nodes, tmp_path):
    settings = nodes.tls("controller")
    controller = ControllerProcess(ControllerConfig(
        listen_address="127.0.0.1:0", store_path=str(tmp_path / "controller"), tls=settings,
        cluster_secret=CLUSTER_SECRET, metrics_listen_address="127.0.0.1:0"))
    controller.start()
    try:
        nodes.start(tls=nodes.tls("master"), controller_address=controller.address,
                    controller_heartbeat_interval_ms=100)
        base, ca = f"https://{controller.metrics.address}", trusting(settings.trust_file)
        wait_until(lambda: b'rmqstore_controller_group_has_master{group="broker-a"} 1.0'
                   in get(f"{base}/metrics", ca)[1], 20, "the controller elects the node")
        assert b"rmqstore_controller_active 1.0" in get(f"{base}/metrics", ca)[1]
        assert get(f"{base}/console", ca)[0] == 200
        assert get(f"{base}/api/cluster", ca)[0] == 401
        status, body = get(f"{base}/api/cluster", ca, token=controller.token)
        assert status == 200
        assert [g["broker_name"] for g in json.loads(body)["groups"]] == ["broker-a"]
        refused(f"http://{controller.metrics.address}/metrics")
        refused(f"{base}/metrics", ssl.create_default_context())
    finally:
        controller.stop()


def test_a_tls_archive_serves_its_metrics_and_json_api_over_https(nodes, tmp_path):
    settings = nodes.tls("archive")
    archive = ArchiveProcess(ArchiveConfig(
        listen_address="127.0.0.1:0", http_listen_address="127.0.0.1:0",
        metrics_listen_address="127.0.0.1:0", store_path=str(tmp_path / "archive"),
        cluster_secret=CLUSTER_SECRET, tls=settings))
    archive.start()
    try:
        ca = trusting(settings.trust_file)
        status, body = get(f"https://{archive.metrics.address}/metrics", ca)
        assert status == 200 and b"rmqstore_archive_retention_deleted_files_total" in body
        api = f"https://{archive.http_address}/api/holdings"
        assert get(api, ca)[0] == 401
        status, body = get(api, ca, token=archive.token)
        assert status == 200 and json.loads(body)["groups"] == []
        refused(f"http://{archive.http_address}/api/holdings")
        refused(f"http://{archive.metrics.address}/metrics")
    finally:
        archive.stop()


def test_without_tls_the_endpoints_stay_plain_http(nodes):
    node = nodes.start(metrics_listen_address="127.0.0.1:0")
    assert node.metrics.scheme == "http"
    assert get(f"http://{node.metrics.address}/metrics")[0] == 200
    assert get(f"http://{node.metrics.address}/api/node")[0] == 401
    refused(f"https://{node.metrics.address}/metrics", ssl.create_default_context())


def test_the_https_context_is_tls_1_2_or_later_and_off_without_tls(nodes):
    assert http_ssl_context(None) is None
    assert http_ssl_context(TlsSettings()) is None
    context = http_ssl_context(nodes.tls("master"))
    assert context.minimum_version is ssl.TLSVersion.TLSv1_2
    assert context.verify_mode is ssl.CERT_NONE
    assert http_ssl_context(nodes.tls("master", need_client_auth=True)).verify_mode \
        is ssl.CERT_REQUIRED
