"""The compose cluster end to end: build (or reuse) the images, bring deploy/docker-compose.yml up
under a project name of its own, send and receive through the RocketMQ 5 API from the host, kill
the master container and see a slave take over and serve, then `down -v` whatever happened. Two
broker groups (broker-a: master, slave1, slave2; broker-b: b-master, b-slave1, b-slave2) each
elect a master, the active controller's route lists both, and a topic created in both groups
(`topic create --groups all`) takes the official RocketMQ 5 Python client's sends from the host
in both groups' queues, all of which it receives. The commitlog archive answers, and Prometheus
scrapes every process of both groups (HTTPS, with the CA) and evaluates the alert rules without
an error or a firing alert. Every port serves TLS
with the CA the project's `certs` service made in deploy/secrets/tls: the host's clients trust
it (the official client through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), a plaintext client is
refused. ACL is on: an unsigned producer is refused, the host's commands sign as the admin user
of deploy/secrets/plain_acl.yml and the official client as its demo user (topic Demo only).

deploy/build runs every time: with the base images cached it only rebuilds the code layers
(seconds); without them it debootstraps (~2.5 min cold, hence the longer timeout). Skipped when
Docker, compose or the cluster's host ports are not available.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import grpc
import pytest

from cluster.admin.admin_token import read_token_file
from cluster.client.admin_client import AdminClient
from cluster.client.controller_client import ControllerClient
from cluster.drills.compose_cluster import compose_command
from cluster.controller.route_wire import route_from_pb
from cluster.security.cert_authority import load_cert, subject_alt_names
from cluster.security.acl_file import admin_credentials, read_acl_file
from cluster.security.tls import ClientTls
from tests.deploy.compose_support import DEPLOY, REPO, build_images, skip_reason
from tests.support.official_client import client_home, run_tool
from tests.support.waiting import wait_until

# The official client's driver script (run in a subprocess: its generated modules clash with ours).
OFFICIAL_TOOL = os.path.join(REPO, "tests", "messaging", "official_consumer_tool.py")
NODES = {"master": "127.0.0.1:10911", "slave1": "127.0.0.1:10921", "slave2": "127.0.0.1:10931"}
ENDPOINTS = ";".join(NODES.values())  # what a client on the host is given
NODES_B = {"b-master": "127.0.0.1:11011", "b-slave1": "127.0.0.1:11021",
           "b-slave2": "127.0.0.1:11031"}  # broker-b
CONTROLLERS = ("127.0.0.1:9876", "127.0.0.1:9877")
CA = os.path.join(DEPLOY, "secrets", "tls", "ca.pem")  # written by the compose `certs` service
ACL = os.path.join(DEPLOY, "secrets", "plain_acl.yml")  # written by deploy/build


def _cli(*args: str, timeout: float = 60, ok: bool = True) -> str:
    r = subprocess.run([sys.executable, "-m", "cluster", *args, "--tls-ca", CA], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    assert (r.returncode == 0) == ok, f"cluster {' '.join(args)}: {r.stdout}{r.stderr}"
    return r.stdout + r.stderr


def _signed(*args: str, **kw) -> str:
    """A messaging command signed as the compose ACL's admin user."""
    access_key, secret_key = admin_credentials(ACL)
    return _cli(*args, "--access-key", access_key, "--secret-key", secret_key, **kw)


def _role(address: str, token: str, tls: ClientTls | None = None) -> str:
    try:
        with AdminClient(address, token, timeout=2, tls=tls or ClientTls(CA)) as client:
            return client.status().role
    except Exception:  # noqa: BLE001 - down or not answering yet
        return ""


@pytest.mark.timeout(600)
def test_compose_cluster_serves_the_host_and_fails_over(tmp_path):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    build_images()
    project = f"rmqstoretest{os.getpid()}"
    compose = [*compose_command(), "-p", project, "-f", os.path.join(DEPLOY, "docker-compose.yml")]
    try:
        up = subprocess.run([*compose, "up", "-d"], capture_output=True, text=True, timeout=180)
        assert up.returncode == 0, f"compose up failed:\n{up.stdout}{up.stderr}"
        ids = {name: subprocess.run([*compose, "ps", "-q", name], capture_output=True, text=True,
                                    check=True).stdout.strip()
               for name in [*NODES, *NODES_B, "archive"]}

        def healthy():
            states = subprocess.run(
                ["docker", "inspect", "--format", "{{.State.Health.Status}}", *ids.values()],
                capture_output=True, text=True).stdout.split()
            return states == ["healthy"] * len(ids)
        wait_until(healthy, 180, "healthy nodes", interval=1)  # six nodes on a small host

        token = read_token_file(os.path.join(DEPLOY, "secrets", "admin.token"))
        # TLS only: the CA's certificates name each node's addresses; plaintext is refused
        ips, _ = subject_alt_names(load_cert(os.path.join(DEPLOY, "secrets", "tls",
                                                          "master.pem")))
        assert {"127.0.0.1", "172.28.211.11"} <= set(ips)
        with AdminClient(NODES["master"], token, timeout=3) as plain:
            with pytest.raises(grpc.RpcError) as refused:
                plain.status()
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE

        def master_now(among=tuple(NODES), nodes=NODES) -> str | None:
            return next((n for n in among if _role(nodes[n], token).endswith("MASTER")), None)
        # Containers start together: a fresh group's first master is the first node to report
        # (all stores are empty, so any is safe), not necessarily the service named "master".
        first = wait_until(master_now, 60, "a master", interval=0.5)
        wait_until(lambda: master_now(tuple(NODES_B), NODES_B), 60, "a master of broker-b",
                   interval=0.5)
        # the active controller (the other is the standby) routes both groups, each with its
        # master and its own endpoints (the host's published ports first)
        def route():
            for address in CONTROLLERS:
                try:
                    with ControllerClient(address, token, timeout=5, tls=ClientTls(CA)) as c:
                        return address, route_from_pb(c.groups().route)
                except grpc.RpcError:
                    continue  # the standby refuses, naming the active one
            return None
        def both_routed():
            got = route()
            return got if got and [(g.broker_name, g.has_master, g.registered)
                                   for g in got[1].groups] == [("broker-a", True, True),
                                                               ("broker-b", True, True)] \
                else None
        controller, routed = wait_until(both_routed, 60, "both groups in the route", interval=1)
        assert routed.group("broker-b").endpoints[:3] == tuple(NODES_B.values())
        # the commitlog archive answers the host over TLS with the cluster's admin token
        holdings = json.loads(_cli("history", "holdings", "--archive", "127.0.0.1:9880",
                                   "--token-file", os.path.join(DEPLOY, "secrets", "admin.token"),
                                   "--json"))
        assert len(holdings) == 1 and holdings[0]["archive_id"]
        # Prometheus scrapes every node, both controllers and the archive
        def targets_up() -> bool:
            try:
                with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets",
                                            timeout=5) as resp:
                    active = json.load(resp)["data"]["activeTargets"]
            except OSError:
                return False
            return len(active) == 9 and all(t["health"] == "up" for t in active)
        wait_until(targets_up, 60, "Prometheus scraping every process", interval=1)
        def masters_seen() -> list:
            with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/query?query="
                                        "rmqstore_role%7Brole%3D~%22.*MASTER%22%7D%3D%3D1",
                                        timeout=5) as resp:
                return json.load(resp)["data"]["result"]
        # exactly one node per group reports a master role (scraped every 5 s)
        wait_until(lambda: len(masters_seen()) == 2, 30, "a master per group in Prometheus",
                   interval=1)
        # ... over HTTPS trusting the cluster's CA, and it evaluates deploy/conf/alerts.yml
        # without an error; the healthy cluster fires none of them
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets", timeout=5) as resp:
            urls = [t["scrapeUrl"] for t in json.load(resp)["data"]["activeTargets"]]
        assert all(u.startswith("https://") for u in urls), urls
        def rule_groups() -> list:
            with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/rules",
                                        timeout=5) as resp:
                return json.load(resp)["data"]["groups"]
        wait_until(lambda: all(r["health"] == "ok" for g in rule_groups() for r in g["rules"]),
                   20, "every alert rule evaluated", interval=1)  # "unknown" until then
        assert {g["name"] for g in rule_groups()} >= {"rmqstore-masters", "rmqstore-archive"}
        with urllib.request.urlopen("http://127.0.0.1:9090/api/v1/alerts", timeout=5) as resp:
            alerts = json.load(resp)["data"]["alerts"]
        assert not [a for a in alerts if a["state"] == "firing"], alerts
        # ACL on: an unsigned client is refused, the admin user of plain_acl.yml is not
        out = _cli("produce", "--address", ENDPOINTS, "--topic", "Compose", "--count", "1",
                   ok=False)
        assert "UNAUTHORIZED" in out or "40100" in out or "unauthorized" in out.lower(), out
        out = _signed("produce", "--address", ENDPOINTS, "--topic", "Compose", "--count", "20")
        assert "sent 20 message(s)" in out
        out = _signed("receive", "--address", ENDPOINTS, "--topic", "Compose", "--group", "g",
                   "--count", "20", "--wait", "10")
        assert "20 message(s) from Compose" in out
        # Demo in both groups, through each group's master (the controller finds them)
        out = _cli("topic", "create", "Demo", "--queues", "2", "--groups", "all",
                   "--controller", controller, "--token-file",
                   os.path.join(DEPLOY, "secrets", "admin.token"))
        assert "created topic Demo in 2 group(s)" in out, out
        # it returns once every live node routes Demo in both groups: the client's first
        # QueryRoute, whichever node answers it, names both
        assert "every live node routes it in every group" in out, out
        # the official RocketMQ 5 Python client from the host, given group a's published ports,
        # as the ACL's demo user (its clock in UTC: it writes local time with a "Z"): the route
        # interleaves both groups' queues and it sends round robin, to each group's own nodes
        demo = next(a for a in read_acl_file(ACL).accounts.values() if not a.admin)
        with client_home(os.path.join(str(tmp_path), "client-home")) as home:
            steps = run_tool(OFFICIAL_TOOL, {"endpoint": ENDPOINTS, "ak": demo.access_key,
                                             "sk": demo.secret_key, "steps": [
                {"op": "send", "topic": "Demo", "messages": [
                    {"body": f"official-{i}", "tag": "t"} for i in range(8)]},
                {"op": "receive", "group": "DemoGroup", "topic": "Demo", "tags": "*",
                 "count": 8}],
                "tls": True}, home, timeout=180,
                env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": CA, "TZ": "UTC"})["steps"]
        assert not any("error" in m for m in steps[0]["sent"]), steps[0]
        assert {m["broker"] for m in steps[0]["sent"]} == {"broker-a", "broker-b"}, steps[0]
        assert sorted(m["body"] for m in steps[1]["received"]) == \
            [f"official-{i}" for i in range(8)]
        # ... stored by each group: every node of broker-b holds its share (replicated)
        share_b = sum(m["broker"] == "broker-b" for m in steps[0]["sent"])
        def stored(address: str) -> int:
            with AdminClient(address, token, timeout=5, tls=ClientTls(CA)) as client:
                return sum(t.messages for t in
                           client.list_topics(topic="Demo", with_offsets=True).topics)
        for address in NODES_B.values():
            wait_until(lambda: stored(address) == share_b, 10, f"{share_b} on {address}")

        subprocess.run(["docker", "kill", ids[first]], check=True, capture_output=True)
        new_master = wait_until(lambda: master_now(tuple(n for n in NODES if n != first)), 30,
                                "a slave to take over", interval=0.5)
        # the host's client goes on through the remaining published ports
        out = _signed("produce", "--address", ENDPOINTS, "--topic", "Compose", "--count", "5",
                      "--body", "after {i}")
        assert "sent 5 message(s)" in out, new_master
        out = _signed("receive", "--address", ENDPOINTS, "--topic", "Compose", "--group", "g",
                      "--count", "5", "--wait", "10")
        assert "5 message(s) from Compose" in out and "after 4" in out
    finally:
        subprocess.run([*compose, "down", "-v", "--remove-orphans", "-t", "5"],
                       capture_output=True, timeout=120)
