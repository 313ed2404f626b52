"""The TLS options of every command that calls a node (`--tls-ca`, `--tls-cert`, `--tls-key`)
and the client TLS they give, importing nothing but argparse and cluster.security.tls: the
containers' healthcheck (`python -m cluster health`) runs every 2 s in each of them."""
from __future__ import annotations

import argparse

from common.config_values import ConfigError

from cluster.security.tls import ClientTls


def add_tls_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-ca", metavar="FILE",
                   help="PEM CA of nodes serving TLS (default with --cluster-dir: the folder's)")
    p.add_argument("--tls-cert", metavar="FILE",
                   help="client certificate, for nodes that need one (tlsServerNeedClientAuth)")
    p.add_argument("--tls-key", metavar="FILE", help="the client certificate's key")


def args_tls(args) -> ClientTls | None:
    """The client TLS --tls-ca (with --tls-cert/--tls-key) asks for, None without them."""
    ca = getattr(args, "tls_ca", None)
    if not ca and not getattr(args, "tls_cert", None):
        return None
    try:
        return ClientTls(ca or "", args.tls_cert or "", args.tls_key or "")
    except ConfigError as e:
        raise SystemExit(f"TLS: {e}")
