"""The throwaway CA (cluster/security/cert_authority.py): what its certificates say (CA
constraints, EKU, SANs), 0600 keys, idempotent ensure (a foreign leaf refused, one lacking a
requested name issued anew), the names multi-address clients check, and the `python -m
cluster certs` command."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cluster.security.cert_authority import (CertificateError, ensure_ca, ensure_leaf, issued_by,
                                             load_cert, load_key, load_pair, subject_alt_names,
                                             target_names)
from common.config_values import ConfigError


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_ca_and_leaf_say_what_tls_needs(tmp_path):
    folder = str(tmp_path / "tls")
    ca = ensure_ca(folder, "prod")
    leaf = ensure_leaf(folder, "master", ca, ips=("10.1.2.3",), dns=("master.local",))
    ca_cert, leaf_cert = load_cert(ca.cert_path), load_cert(leaf.cert_path)
    [cn] = ca_cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert cn.value == "rmqstore throwaway CA prod"
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert isinstance(ca_cert.public_key(), ec.EllipticCurvePublicKey)
    assert ca_cert.public_key().curve.name == "secp256r1"
    assert not leaf_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    eku = leaf_cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    ips, dns = subject_alt_names(leaf_cert)
    assert sorted(ips) == ["10.1.2.3", "127.0.0.1"] and sorted(dns) == ["localhost", "master.local"]
    assert issued_by(leaf_cert, ca_cert) and not issued_by(ca_cert, leaf_cert)
    assert (ca_cert.not_valid_after_utc - ca_cert.not_valid_before_utc).days >= 3650
    for files in (ca, leaf):
        assert mode(files.key_path) == 0o600, files.key_path
        load_pair(files)  # the key is the certificate's
    assert sorted(os.listdir(folder)) == ["ca.key", "ca.pem", "master.key", "master.pem"]


def test_ensure_reuses_what_exists_and_makes_what_is_missing(tmp_path):
    folder = str(tmp_path)
    ca = ensure_ca(folder, "c")
    leaf = ensure_leaf(folder, "n1", ca, ips=("10.0.0.1",))
    before = {p: open(p, "rb").read() for p in (ca.cert_path, ca.key_path, leaf.cert_path,
                                                leaf.key_path)}
    assert ensure_ca(folder, "c") == ca
    assert ensure_leaf(folder, "n1", ca, ips=("10.0.0.1",)) == leaf
    assert {p: open(p, "rb").read() for p in before} == before
    # a missing leaf (its certificate gone: the key alone is useless) is made again
    os.unlink(leaf.cert_path)
    ensure_leaf(folder, "n1", ca, ips=("10.0.0.1",))
    assert open(leaf.key_path, "rb").read() != before[leaf.key_path]
    load_pair(leaf)
    assert mode(leaf.key_path) == 0o600


def test_a_leaf_of_another_ca_is_refused_one_without_a_requested_name_reissued(tmp_path):
    ours = ensure_ca(str(tmp_path / "ours"), "ours")
    theirs = ensure_ca(str(tmp_path / "theirs"), "theirs")
    foreign = ensure_leaf(str(tmp_path / "theirs"), "n1", theirs)
    os.replace(foreign.cert_path, str(tmp_path / "ours" / "n1.pem"))
    os.replace(foreign.key_path, str(tmp_path / "ours" / "n1.key"))
    with pytest.raises(CertificateError, match="not issued by the CA"):
        ensure_leaf(str(tmp_path / "ours"), "n1", ours)
    n2 = ensure_leaf(str(tmp_path / "ours"), "n2", ours, ips=("10.0.0.2",))
    serial = load_cert(n2.cert_path).serial_number
    ensure_leaf(str(tmp_path / "ours"), "n2", ours, ips=("10.0.0.9",))
    cert = load_cert(n2.cert_path)
    assert cert.serial_number != serial and "10.0.0.9" in subject_alt_names(cert)[0]
    load_pair(n2)
    with pytest.raises(ConfigError, match="not an IP address"):
        ensure_leaf(str(tmp_path / "ours"), "n3", ours, ips=("host.example",))


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path):
    folder = str(tmp_path)
    ca = ensure_ca(folder, "c")
    a, b = ensure_leaf(folder, "a", ca), ensure_leaf(folder, "b", ca)
    os.replace(b.key_path, a.key_path)
    with pytest.raises(CertificateError, match="does not belong"):
        ensure_leaf(folder, "a", ca)
    with open(a.key_path, "w") as f:
        f.write("not a key\n")
    with pytest.raises(CertificateError, match="not an unencrypted PEM private key"):
        load_key(a.key_path)


def test_the_certs_command_prints_where_the_files_are(tmp_path):
    out = str(tmp_path / "tls")
    argv = [sys.executable, "-m", "cluster", "certs", "--out", out, "--cluster", "demo",
            "--name", "node1", "--ip", "10.9.8.7", "--dns", "node1.demo"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    for name in ("ca.pem", "node1.pem", "node1.key"):
        assert os.path.join(out, name) in first.stdout
    assert f"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={os.path.join(out, 'ca.pem')}" in first.stdout
    assert subject_alt_names(load_cert(os.path.join(out, "node1.pem"))) == \
        (["127.0.0.1", "10.9.8.7"], ["localhost", "node1.demo"])
    assert mode(os.path.join(out, "node1.key")) == mode(os.path.join(out, "ca.key")) == 0o600
    serial = load_cert(os.path.join(out, "node1.pem")).serial_number
    again = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert load_cert(os.path.join(out, "node1.pem")).serial_number == serial  # reused
    with_targets = subprocess.run([*argv, "--endpoints", "10.9.8.7:1;10.9.8.8:1;10.9.8.9:1"],
                                  capture_output=True, text=True, timeout=60)
    assert with_targets.returncode == 0, with_targets.stderr
    dns = subject_alt_names(load_cert(os.path.join(out, "node1.pem")))[1]
    assert "10.9.8.7:1,10.9.8.8:1,10.9.8.9:1" in dns and "10.9.8.7:1,10.9.8.9:1" in dns
    other = str(tmp_path / "other")
    os.makedirs(other)
    foreign = ensure_leaf(other, "node1", ensure_ca(other, "other"))
    os.replace(foreign.cert_path, os.path.join(out, "node1.pem"))
    os.replace(foreign.key_path, os.path.join(out, "node1.key"))
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "not issued by the CA" in refused.stderr


def test_target_names_are_every_sorted_joined_combination():
    assert target_names(["b:2", "a:1"]) == ("a:1,b:2",)
    assert target_names(["c:3", "a:1", "b:2", "a:1"]) == (
        "a:1,b:2", "a:1,c:3", "b:2,c:3", "a:1,b:2,c:3")
    assert target_names(["a:1"]) == ()
