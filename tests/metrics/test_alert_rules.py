"""The compose Prometheus' alert rules (deploy/conf/alerts.yml) and config
(deploy/conf/prometheus.yml): `promtool check rules`, `promtool test rules` on
deploy/conf/alerts_test.yml (every alert firing for one broker group and not for another), and
`promtool check config` of the config as compose mounts it. Every scrape job of a process that
runs TLS scrapes HTTPS with the cluster's CA. Every rmqstore_* name the rules use, and every
input series of their tests with its label names, is what a real `python -m cluster local
--tls --archive` exports, scraped over HTTPS with its CA once it has been written to, read by a
consumer group and has shipped a file to the archive. Skipped, saying so, without promtool
(Debian's prometheus package; scripts/setup installs it)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import subprocess
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cluster.security.cert_authority import ensure_ca
from tests.integration.harness import LocalCluster, cluster_cli, pid_gone, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONF = os.path.join(REPO, "deploy", "conf")
ALERTS = os.path.join(CONF, "alerts.yml")
ALERTS_TEST = os.path.join(CONF, "alerts_test.yml")
COMPOSE = os.path.join(REPO, "deploy", "docker-compose.yml")
IN_CONTAINER = "/etc/prometheus/"  # where compose mounts prometheus.yml, alerts.yml, tls/ca.pem
SCRAPE_LABELS = {"instance", "job"}  # what Prometheus adds to every scraped series
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
SERIES = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}$")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("no promtool on PATH: install Debian's prometheus package (scripts/setup "
                    "does, as root)")
    return path


def run(*args: str, cwd: str = REPO) -> str:
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=120, cwd=cwd)
    assert r.returncode == 0, f"{' '.join(args)}:\n{r.stdout}{r.stderr}"
    return r.stdout + r.stderr


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def rules() -> list[dict]:
    return [rule for group in load(ALERTS)["groups"] for rule in group["rules"]]


def test_promtool_checks_and_unit_tests_the_alert_rules():
    tool = promtool()
    out = run(tool, "check", "rules", ALERTS)
    assert f"SUCCESS: {len(rules())} rules found" in out, out
    out = run(tool, "test", "rules", ALERTS_TEST)
    assert "SUCCESS" in out and "FAILED" not in out, out


def test_every_alert_has_severity_summary_description_and_a_firing_and_a_quiet_case():
    alerts = [r for r in rules() if "alert" in r]
    assert {r["alert"] for r in alerts} >= {
        "RmqstoreGroupWithoutMaster", "RmqstoreNoActiveController", "RmqstoreSlaveOutOfSync",
        "RmqstoreDiskAboveWarning", "RmqstoreConsumerLagGrowing", "RmqstoreSlaveLagGrowing",
        "RmqstoreArchiveFallingBehind"}
    cases = [case for test in load(ALERTS_TEST)["tests"] for case in test["alert_rule_test"]]
    for rule in alerts:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine), f"{name}: no test where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{name}: no test where it is quiet"
        # each firing alert names its broker group (or is about the controllers as a whole)
        for c in mine:
            for alert in c["exp_alerts"]:
                labels = alert["exp_labels"]
                assert labels.get("group") or labels.get("broker_name") or \
                    "controller" in alert["exp_annotations"]["summary"].lower(), (name, labels)


def compose_services() -> dict[str, dict[str, str]]:
    """{service: its conf's properties} of the compose services that mount a deploy/conf file."""
    out = {}
    for name, service in load(COMPOSE)["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./conf/") and source.endswith(".conf"):
                with open(os.path.join(REPO, "deploy", source), encoding="utf-8") as fh:
                    out[name] = dict(line.strip().split("=", 1) for line in fh
                                     if "=" in line and not line.lstrip().startswith("#"))
    return out


def test_the_compose_prometheus_scrapes_every_process_over_https_with_the_ca(tmp_path):
    config = load(os.path.join(CONF, "prometheus.yml"))
    assert config["rule_files"] == [IN_CONTAINER + "alerts.yml"]
    mounts = load(COMPOSE)["services"]["prometheus"]["volumes"]
    assert f"./conf/alerts.yml:{IN_CONTAINER}alerts.yml:ro" in mounts
    assert f"./secrets/tls/ca.pem:{IN_CONTAINER}tls/ca.pem:ro" in mounts
    jobs = {target: job for job in config["scrape_configs"]
            for static in job["static_configs"] for target in static["targets"]}
    services = {name: props for name, props in compose_services().items()
                if props.get("metricsListenAddress")}
    assert len(services) == 9  # both groups' six nodes, both controllers, the archive
    for name, props in services.items():
        target = f"{name}:{props['metricsListenAddress'].rpartition(':')[2]}"
        assert target in jobs, f"{target} is not scraped"
        job = jobs[target]
        if props.get("tlsEnable") == "true":
            assert job.get("scheme") == "https", target
            assert job["tls_config"]["ca_file"] == IN_CONTAINER + "tls/ca.pem", target
        else:
            assert job.get("scheme", "http") == "http", target
    assert set(jobs) == {f"{n}:{p['metricsListenAddress'].rpartition(':')[2]}"
                         for n, p in services.items()}

    # promtool checks the config with its files where compose mounts them
    tool = promtool()
    folder = str(tmp_path / "prometheus")
    ensure_ca(os.path.join(folder, "tls"), "ComposeCluster")
    shutil.copy(ALERTS, os.path.join(folder, "alerts.yml"))
    with open(os.path.join(CONF, "prometheus.yml"), encoding="utf-8") as fh:
        text = fh.read().replace(IN_CONTAINER, folder + "/")
    with open(os.path.join(folder, "prometheus.yml"), "w", encoding="utf-8") as fh:
        fh.write(text)
    out = run(tool, "check", "config", os.path.join(folder, "prometheus.yml"))
    assert "is valid prometheus config file syntax" in out and f"SUCCESS: {len(rules())} rules " \
        "found" in out, out


# -- the names the rules use are what a real cluster exports ----------------------------------
def used_names() -> set[str]:
    """The rmqstore_* metric names in the rules' expressions and annotations."""
    names = set()
    for rule in rules():
        for text in (rule["expr"], *rule.get("annotations", {}).values()):
            names |= {t for t in IDENTIFIER.findall(text) if t.startswith("rmqstore_")}
    return names


def recorded() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def input_series() -> list[tuple[str, dict[str, str]]]:
    out = []
    for test in load(ALERTS_TEST)["tests"]:
        for series in test["input_series"]:
            m = SERIES.match(series["series"])
            assert m, series["series"]
            out.append((m.group(1), dict(LABEL.findall(m.group(2)))))
    return out


def scrape(address: str, context: ssl.SSLContext) -> dict[str, list[dict[str, str]]]:
    """{sample name: [its label sets]} of one process, over HTTPS."""
    with urllib.request.urlopen(f"https://{address}/metrics", timeout=10,
                                context=context) as resp:
        text = resp.read().decode()
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, [])
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


@pytest.fixture
def local_cluster(tmp_path):
    promtool()  # nothing to check the rules against without it
    lc = LocalCluster(os.path.join(tmp_path, "cluster"), "--tls", "--archive")
    try:
        yield lc
    finally:
        archive = []
        try:
            archive = [lc.info()["archive"]["pid"]]
        except (OSError, ValueError, KeyError):
            pass
        if lc.proc.poll() is None:
            os.kill(lc.proc.pid, signal.SIGINT)  # a clean stop, the archive's too
            try:
                lc.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        lc.kill_all()
        for pid in archive:
            if not pid_gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_every_metric_the_rules_use_is_exported_by_a_real_cluster(local_cluster):
    lc = local_cluster
    lc.wait_for("Ctrl-C stops everything cleanly", timeout=120)
    info = lc.info()
    context = ssl.create_default_context(cafile=info["tls"]["ca_file"])
    addresses = [info["controller"]["metrics"], info["archive"]["metrics"],
                 *(n["metrics"] for n in info["nodes"])]
    # a sealed 8 MiB commitlog file (it ships to the archive) and a consumer group
    sent = cluster_cli("produce", "--cluster-dir", lc.root, "--topic", "AlertCheck",
                       "--body", "{i}" + "x" * 60_000, "--count", "160", "--batch", "10")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    got = cluster_cli("receive", "--cluster-dir", lc.root, "--topic", "AlertCheck",
                      "--group", "alert-check", "--count", "5", "--wait", "10")
    assert got.returncode == 0, got.stdout + got.stderr
    wait_until(lambda: any(labels.get("group") == "broker-a" for labels in scrape(
        info["archive"]["metrics"], context).get("rmqstore_archive_unindexed_files", [])),
        90, "the archive holding broker-a's first file")
    wait_until(lambda: scrape(info["nodes"][0]["metrics"], context).get(
        "rmqstore_consumer_lag_messages"), 30, "the master's consumer lag")

    exported: dict[str, list[dict[str, str]]] = {}
    for address in addresses:
        for name, label_sets in scrape(address, context).items():
            exported.setdefault(name, []).extend(label_sets)

    missing = sorted(used_names() - set(exported))
    assert not missing, f"alerts.yml uses names no process exports: {missing}"
    for name, labels in input_series():
        if name in recorded():
            continue
        assert name in exported, f"alerts_test.yml: {name} is not exported"
        real = {frozenset(s) for s in exported[name]}
        assert real, f"{name}: exported without a sample, its labels unknown"
        assert frozenset(set(labels) - SCRAPE_LABELS) in real, \
            f"alerts_test.yml: {name}{sorted(labels)}; exported with {sorted(map(sorted, real))}"
        assert SCRAPE_LABELS <= set(labels), f"{name}: give instance and job as Prometheus does"
    roles = {s["role"] for s in exported["rmqstore_role"]}
    assert {labels["role"] for name, labels in input_series() if name == "rmqstore_role"} <= roles
    for rule in rules():
        for role in re.findall(r'role=~"([^"]+)"', rule["expr"]):
            assert set(role.split("|")) <= roles, (rule.get("alert"), role)
