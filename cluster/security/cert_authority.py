"""A throwaway certificate authority for a cluster: one CA and a leaf certificate per node,
controller or operator, generated with `cryptography` (never by shelling out to openssl).

Files in one folder (`python -m cluster certs --out DIR`, `python -m cluster local --tls` puts
them in <cluster dir>/tls/):

    ca.pem           the CA certificate (PEM "CERTIFICATE"): what clients and peers trust;
                     point the official clients' gRPC at it with GRPC_DEFAULT_SSL_ROOTS_FILE_PATH
    ca.key           the CA's private key (PEM PKCS#8 "PRIVATE KEY", unencrypted, mode 0600)
    <name>.pem       a leaf certificate (PEM "CERTIFICATE", issued by ca.pem)
    <name>.key       its private key (PEM PKCS#8 "PRIVATE KEY", unencrypted, mode 0600)

Keys are EC P-256 (ECDSA with SHA-256): what every TLS stack gRPC builds on accepts, and cheap
to generate on each first start. A leaf carries both serverAuth and clientAuth (a node serves
and also calls its peers with the same certificate: mutual TLS) and names its addresses as
subjectAltName: clients connect by IP (the routes hold IPv4 addresses), so the IPs must be
there; 127.0.0.1 and localhost always are.

Clients given several addresses at once (the official clients turn "a:p;b:p" and a route's
endpoints into one gRPC target "ipv4:a:p,b:p", sorted) make gRPC check the server's
certificate against the whole joined list as a host name, so such a certificate also needs that
string as a DNS name: `target_names` lists them for every combination of a group's addresses.

"Ensure" is idempotent: what exists is reused, what is missing is generated; a leaf that another
CA issued is refused, one that lacks a requested name or is about to expire is issued anew (see
`ensure_leaf`). A key is written to a temporary file created with mode 0600 (never readable by
others, not even for a moment) and renamed into place before its certificate, so a certificate
present means its key is too.
"""
from __future__ import annotations

import datetime
import ipaddress
import itertools
import os
from dataclasses import dataclass
from typing import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.config_values import ConfigError

CA_NAME = "ca"
# The CA lives as long as a throwaway cluster might: 10 years, so a demo or test cluster left
# running never meets an expired root (there is no rotation story for a throwaway CA; a real
# deployment brings its own PKI and names its files in broker.conf).
CA_DAYS = 3650
# Leaves are renewed by `ensure_leaf` when fewer than RENEW_DAYS remain, so they can be short.
LEAF_DAYS = 825
RENEW_DAYS = 30
# Containers' clocks may differ a little: a certificate is valid from an hour ago.
BACKDATE = datetime.timedelta(hours=1)
ALWAYS_IPS = ("127.0.0.1",)
ALWAYS_DNS = ("localhost",)


class CertificateError(ConfigError):
    """A certificate or key file cannot be used (unreadable, from another CA, mismatched)."""


@dataclass(frozen=True)
class CertFiles:
    """Where one certificate and its key are."""
    cert_path: str
    key_path: str


def ca_files(folder: str) -> CertFiles:
    return leaf_files(folder, CA_NAME)


def leaf_files(folder: str, name: str) -> CertFiles:
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"certificate name {name!r}: want a plain file name")
    return CertFiles(os.path.join(folder, f"{name}.pem"), os.path.join(folder, f"{name}.key"))


def target_names(addresses: Sequence[str]) -> tuple[str, ...]:
    """The names gRPC checks a certificate against when a client connects to two or more of
    `addresses` (host:port) in one target: each such set sorted as strings and joined by
    commas, the official clients' form ("ipv4:" + that; cluster/client/connection.py too)."""
    unique = sorted(set(addresses))
    return tuple(",".join(combo) for size in range(2, len(unique) + 1)
                 for combo in itertools.combinations(unique, size))


def ensure_ca(folder: str, cluster: str) -> CertFiles:
    """The CA of `folder`, generated (named "rmqstore throwaway CA <cluster>") if missing."""
    files = ca_files(folder)
    if os.path.exists(files.cert_path):
        cert, key = load_pair(files)
        if not isinstance(cert.public_key(), ec.EllipticCurvePublicKey) or \
                not _is_ca(cert):
            raise CertificateError(f"{files.cert_path} is not a CA certificate")
        return files
    os.makedirs(folder, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"rmqstore throwaway CA {cluster}"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"rmqstore {cluster}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write(files, cert, key)
    return files


def ensure_leaf(folder: str, name: str, ca: CertFiles, ips: tuple[str, ...] = (),
                dns: tuple[str, ...] = ()) -> CertFiles:
    """The leaf `name` of `folder`, issued by `ca`, with every requested IP and DNS name (plus
    127.0.0.1 and localhost) as subjectAltName. An existing leaf is reused when `ca` issued it,
    it names all of them and it is valid for RENEW_DAYS more; one without a requested name
    (the cluster moved to other ports) or about to expire is issued anew with a new key; one
    from another CA is refused (CertificateError: delete it to have a new one made), as it
    would not be trusted by the peers that trust `ca`."""
    want_ips = tuple(dict.fromkeys((*ALWAYS_IPS, *ips)))
    want_dns = tuple(dict.fromkeys((*ALWAYS_DNS, *dns)))
    for ip in want_ips:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise ConfigError(f"--ip {ip!r} is not an IP address") from None
    ca_cert, ca_key = load_pair(ca)
    files = leaf_files(folder, name)
    now = datetime.datetime.now(datetime.timezone.utc)
    if os.path.exists(files.cert_path):
        cert, _ = load_pair(files)
        if not issued_by(cert, ca_cert):
            raise CertificateError(f"{files.cert_path} was not issued by the CA {ca.cert_path}; "
                                   f"delete {files.cert_path} and {files.key_path} to have a "
                                   f"new one made")
        have_ips, have_dns = subject_alt_names(cert)
        names_all = set(want_ips) <= set(have_ips) and set(want_dns) <= set(have_dns)
        if names_all and cert.not_valid_after_utc - now > datetime.timedelta(days=RENEW_DAYS):
            return files
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                         *ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)])
    sans = [*(x509.IPAddress(ipaddress.ip_address(ip)) for ip in want_ips),
            *(x509.DNSName(d) for d in want_dns)]
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(min(now + datetime.timedelta(days=LEAF_DAYS),
                                 ca_cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False,
                                         decipher_only=False),
                           critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(files, cert, key)
    return files


# -- reading ----------------------------------------------------------------------------------
def load_cert(path: str) -> x509.Certificate:
    try:
        with open(path, "rb") as f:
            return x509.load_pem_x509_certificate(f.read())
    except OSError as e:
        raise CertificateError(f"cannot read the certificate {path}: {e}") from None
    except ValueError as e:
        raise CertificateError(f"{path} is not a PEM certificate: {e}") from None


def load_key(path: str):
    try:
        with open(path, "rb") as f:
            return serialization.load_pem_private_key(f.read(), password=None)
    except OSError as e:
        raise CertificateError(f"cannot read the private key {path}: {e}") from None
    except (ValueError, TypeError) as e:
        raise CertificateError(f"{path} is not an unencrypted PEM private key: {e}") from None


def load_pair(files: CertFiles):
    """(certificate, key) of `files`; CertificateError when the key is not the certificate's."""
    cert, key = load_cert(files.cert_path), load_key(files.key_path)
    if not keys_match(cert, key):
        raise CertificateError(f"the key {files.key_path} does not belong to the certificate "
                               f"{files.cert_path}")
    return cert, key


def keys_match(cert: x509.Certificate, key) -> bool:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
        return True
    except (ValueError, TypeError, InvalidSignature):
        return False


def subject_alt_names(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    """([IP, ...], [DNS name, ...]) of the certificate's subjectAltName."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return ([str(ip) for ip in san.get_values_for_type(x509.IPAddress)],
            list(san.get_values_for_type(x509.DNSName)))


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


# -- writing ----------------------------------------------------------------------------------
def _write(files: CertFiles, cert: x509.Certificate, key) -> None:
    """The key, then the certificate, each written to a temporary file and renamed into place:
    a certificate present means its key is complete."""
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    _replace(files.key_path, key_pem, 0o600)
    _replace(files.cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _replace(path: str, data: bytes, mode: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
