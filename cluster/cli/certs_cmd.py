"""`python -m cluster certs --out DIR [--cluster NAME] [--name NAME --ip IP --dns NAME ...
[--endpoints "a:p;b:p;c:p"]]`: make (or reuse) a throwaway CA in DIR and, with --name, a
certificate for a node, controller or operator that names the given addresses
(cluster/security/cert_authority.py). --endpoints: a group's node addresses as clients are
given them; the certificate then also names every joined list of two or more of them, which is
what gRPC checks when a client (the official ones too) connects to several at once. Prints where the
files are and the line that points official clients at the CA. Exit status 1 when an existing
file cannot be reused (another CA's, or missing a requested address)."""
from __future__ import annotations

import argparse
import os
import sys

from common.config_values import ConfigError

from cluster.security.cert_authority import ensure_ca, ensure_leaf, target_names


def register(sub) -> None:
    p = sub.add_parser("certs", help="make a throwaway CA and certificates (TLS)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder of the CA and the certificates")
    p.add_argument("--cluster", default="DefaultCluster",
                   help="cluster name, written into the CA's name")
    p.add_argument("--name", help="a certificate <out>/<name>.pem with its key <name>.key")
    p.add_argument("--ip", action="append", default=[],
                   help="an IP address the certificate names (repeatable; 127.0.0.1 always)")
    p.add_argument("--dns", action="append", default=[],
                   help="a DNS name it names (repeatable; localhost always)")
    p.add_argument("--endpoints", action="append", default=[], metavar="A:P;B:P",
                   help="addresses clients reach the group at (repeatable): the certificate "
                        "names every combination, as multi-address clients check it")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if (args.ip or args.dns or args.endpoints) and not args.name:
        print("--ip, --dns and --endpoints need --name", file=sys.stderr)
        return 2
    dns = list(args.dns)
    for endpoints in args.endpoints:
        dns += target_names([a.strip() for a in endpoints.replace(",", ";").split(";")
                             if a.strip()])
    out = os.path.abspath(args.out)
    try:
        ca = ensure_ca(out, args.cluster)
        print(f"CA certificate: {ca.cert_path}")
        print(f"CA key:         {ca.key_path} (mode 0600; keep it, or delete the folder to "
              f"start over)")
        if args.name:
            leaf = ensure_leaf(out, args.name, ca, tuple(args.ip), tuple(dns))
            print(f"certificate:    {leaf.cert_path}")
            print(f"key:            {leaf.key_path} (mode 0600)")
    except ConfigError as e:
        print(f"certs: {e}", file=sys.stderr)
        return 1
    print(f"official clients (tls_enable=True): GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={ca.cert_path}")
    return 0
