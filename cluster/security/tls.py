"""TLS of every gRPC port, and the one rule of "secure or insecure".

A node's, controller's or archive's settings (broker.conf / controller.conf; RocketMQ's
tls.server.* names without the dots): KEY_DOCS below.

Operator tools (cluster/client, the CLI) use a `ClientTls`: the CA to trust and, for a server
that needs client certificates, a certificate and key. `open_channel` and `add_port` are the
only places that choose between a secure and a plaintext channel or port; `http_ssl_context`
is the same choice for the process's HTTP endpoint (/metrics, the console, the archive's JSON
API: cluster/metrics/exposition.py), which serves HTTPS with the same certificate and key
when tlsEnable is on, TLS 1.2 or later, and with tlsServerNeedClientAuth asks for a client
certificate issued by the trust CA there too.

The peer's certificate, on the server side: `peer_identity(context)` (the verified chain's
subject names and common name, from `context.auth_context()`), empty without a client
certificate. gRPC's Python server either requires and verifies client certificates
(tlsServerNeedClientAuth=true) or does not ask for one at all.
"""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Sequence, Union

import grpc

from common.config_values import ConfigError, KeyDoc, prop_bool

# The keys and what each means (TlsSettings' fields; the docs' configuration reference).
KEY_DOCS = {
    "tlsEnable": KeyDoc("false: plaintext. true: serve TLS only, and call peers over TLS.",
                        field="enabled"),
    "tlsServerCertPath": KeyDoc("PEM certificate (chain) this process presents, to clients "
                                "and, when it calls its peers (replication, forwarding, the "
                                "controller), as its client certificate.", field="cert_file"),
    "tlsServerKeyPath": KeyDoc("Its PEM private key (unencrypted); it must belong to the "
                               "certificate.", field="key_file"),
    "tlsServerTrustCertPath": KeyDoc("PEM CA certificate(s) that verify peers: the servers this "
                                     "process calls, and clients' certificates (empty: gRPC's "
                                     "default roots for outgoing calls, and no client "
                                     "certificates).", field="trust_file"),
    "tlsServerNeedClientAuth": KeyDoc("true: refuse, at the handshake, a client without a "
                                      "certificate issued by the trust CA. The official "
                                      "RocketMQ clients present none, so only for ports that "
                                      "serve members and operators with certificates.",
                                      field="need_client_auth"),
}
KEYS = frozenset(KEY_DOCS)
Options = Sequence[tuple[str, object]]


def _read(key: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"{key}={path}: cannot read it: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{key}={path}: not a PEM file")
    return data


@dataclass(frozen=True)
class ClientTls:
    """What a client trusts (`ca_file`: PEM CA certificates; "" = gRPC's default roots) and,
    optionally, the certificate it presents (`cert_file` and `key_file`, both or neither)."""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("a client certificate needs its key: give both or neither")
        for what, path in (("CA file", self.ca_file), ("client certificate", self.cert_file),
                           ("client key", self.key_file)):
            if path and not os.path.isfile(path):
                raise ConfigError(f"TLS {what} {path}: no such file")

    def credentials(self) -> grpc.ChannelCredentials:
        """The files read now (so renewed files are picked up by the next channel)."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read("CA file", self.ca_file) if self.ca_file else None,
            private_key=_read("client key", self.key_file) if self.key_file else None,
            certificate_chain=_read("client certificate", self.cert_file)
            if self.cert_file else None)


@dataclass(frozen=True)
class TlsSettings:
    """A server's TLS (see the module doc); disabled by default. Validated on creation: the
    files exist, are readable PEM, and the key belongs to the certificate."""
    enabled: bool = False
    cert_file: str = ""
    key_file: str = ""
    trust_file: str = ""
    need_client_auth: bool = False

    def __post_init__(self) -> None:
        if not self.enabled:
            if self.need_client_auth:
                raise ConfigError("tlsServerNeedClientAuth=true needs tlsEnable=true")
            return
        if not self.cert_file:
            raise ConfigError("tlsEnable=true needs tlsServerCertPath (a PEM certificate)")
        if not self.key_file:
            raise ConfigError("tlsEnable=true needs tlsServerKeyPath (the certificate's key)")
        if self.need_client_auth and not self.trust_file:
            raise ConfigError("tlsServerNeedClientAuth=true needs tlsServerTrustCertPath (the "
                              "CA that issued the clients' certificates)")
        cert = _read("tlsServerCertPath", self.cert_file)
        key = _read("tlsServerKeyPath", self.key_file)
        if self.trust_file:
            _read("tlsServerTrustCertPath", self.trust_file)
        _check_pair(cert, key, self.cert_file, self.key_file)

    def client(self) -> ClientTls | None:
        """How this process calls its peers: trusting trust_file, presenting its own
        certificate (so a peer that needs client certificates accepts it); None: plaintext."""
        if not self.enabled:
            return None
        return ClientTls(self.trust_file, self.cert_file, self.key_file)


def tls_settings_from_properties(props: dict[str, str]) -> TlsSettings:
    return TlsSettings(enabled=prop_bool(props, "tlsEnable", False),
                       cert_file=props.get("tlsServerCertPath", "").strip(),
                       key_file=props.get("tlsServerKeyPath", "").strip(),
                       trust_file=props.get("tlsServerTrustCertPath", "").strip(),
                       need_client_auth=prop_bool(props, "tlsServerNeedClientAuth", False))


def _check_pair(cert_pem: bytes, key_pem: bytes, cert_file: str, key_file: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as e:
        raise ConfigError(f"tlsServerCertPath={cert_file}: not a PEM certificate: {e}") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"tlsServerKeyPath={key_file}: not an unencrypted PEM private key: "
                          f"{e}") from None
    spki, der = serialization.PublicFormat.SubjectPublicKeyInfo, serialization.Encoding.DER
    if cert.public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise ConfigError(f"tlsServerKeyPath={key_file}: the key does not belong to the "
                          f"certificate tlsServerCertPath={cert_file}")


# -- the one rule: secure or insecure -----------------------------------------------------------
def server_credentials(settings: TlsSettings) -> grpc.ServerCredentials:
    """The server side of `settings` (enabled); the files are read now."""
    if not settings.enabled:
        raise ValueError("server_credentials of disabled TLS settings")
    pair = (_read("tlsServerKeyPath", settings.key_file),
            _read("tlsServerCertPath", settings.cert_file))
    roots = _read("tlsServerTrustCertPath", settings.trust_file) \
        if settings.need_client_auth else None
    return grpc.ssl_server_credentials([pair], root_certificates=roots,
                                       require_client_auth=settings.need_client_auth)


def add_port(server: grpc.Server, address: str, settings: TlsSettings | None) -> int:
    """Listen on `address` with TLS when `settings` enable it, else plaintext; the port (0 when
    it cannot listen, as gRPC says)."""
    if settings is not None and settings.enabled:
        return server.add_secure_port(address, server_credentials(settings))
    return server.add_insecure_port(address)


def http_ssl_context(settings: TlsSettings | None) -> ssl.SSLContext | None:
    """The server side of `settings` for an HTTP endpoint: None (plain HTTP) unless they enable
    TLS; else TLS 1.2+ with the same certificate and key as the gRPC port (read now) and, with
    need_client_auth, client certificates required and verified against the trust file."""
    if settings is None or not settings.enabled:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.cert_file, settings.key_file)
        if settings.need_client_auth:
            context.load_verify_locations(cafile=settings.trust_file)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"tlsServerCertPath={settings.cert_file}, tlsServerKeyPath="
                          f"{settings.key_file}: cannot serve HTTPS with them: {e}") from None
    return context


Security = Union[TlsSettings, ClientTls, None]


def open_channel(address: str, security: Security, options: Options = (), *,
                 aio: bool = False) -> grpc.Channel:
    """A channel to `address`: a node's outgoing call with its TlsSettings (trusting its trust
    file, presenting its own certificate), an operator's with a ClientTls, or plaintext (None,
    or disabled settings). `aio`: a grpc.aio channel, to be opened and used on the event loop
    that will run its calls."""
    grpc_ = grpc.aio if aio else grpc
    tls = security.client() if isinstance(security, TlsSettings) else security
    if tls is None:
        return grpc_.insecure_channel(address, options=list(options))
    options = list(options)
    if address.startswith("ipv4:") and "," in address and \
            not any(k == "grpc.ssl_target_name_override" for k, _ in options):
        # Several addresses in one target ("ipv4:a:p,b:p", cluster/client/connection.py): gRPC
        # would check every server's certificate against that whole string and fail. Check it
        # against the first address's IP instead, which each node's certificate must name
        # (`cluster local --tls` and the compose cluster give every certificate all of them).
        first = address[len("ipv4:"):].split(",")[0]
        options.append(("grpc.ssl_target_name_override", first.rpartition(":")[0]))
    return grpc_.secure_channel(address, tls.credentials(), options=options)


def peer_identity(context: grpc.ServicerContext) -> dict[str, list[str]]:
    """What TLS verified about the calling peer: {"x509_common_name": [...],
    "x509_subject_alternative_name": [...], "transport_security_type": ["ssl"], ...} as
    str lists (empty lists: plaintext, or no client certificate)."""
    return {key: [v.decode(errors="replace") for v in values]
            for key, values in (context.auth_context() or {}).items()}
