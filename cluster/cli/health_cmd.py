"""`python -m cluster health --address host:port [--service NAME]`: a container healthcheck.

Asks grpc.health.v1 Health.Check (no token: health is not an Admin call) and exits 0 only when
the answer is SERVING; 1 for NOT_SERVING, an unknown service or no answer within --timeout. A
node answers NOT_SERVING while its store is not writable or it is shutting down.
A controller answers too: SERVING while it runs, standby or active; `--service
rmqstore.controller.Active` is SERVING only on the active one. `--connect-only` exits 0 once a
gRPC connection is up, for servers without the health service. A server serving TLS needs
`--tls-ca FILE` (and `--tls-cert`/`--tls-key` when it needs client certificates).

Every compose container runs it every 2 s, so `python -m cluster health` imports only this
module (cluster/__main__.py; gRPC and the TLS options): the whole command line costs four
times the CPU, and two broker groups' probes alone kept two cores busy.
"""
from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster.cli.tls_args import add_tls_args, args_tls
from cluster.security.tls import open_channel


def register(sub) -> None:
    p = sub.add_parser("health", help="exit 0 when a node's grpc.health.v1 answers SERVING",
                       description=__doc__.splitlines()[0])
    p.add_argument("--address", required=True, help="host:port of the node")
    p.add_argument("--service", default="", help="service name ('' = the whole server)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer")
    p.add_argument("--connect-only", action="store_true",
                   help="only check that a gRPC connection can be made")
    add_tls_args(p)
    p.set_defaults(run=_health)


def main(argv: list[str]) -> int:
    """`python -m cluster health ARGS` without the other commands' imports."""
    parser = argparse.ArgumentParser(prog="python -m cluster")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["health", *argv])
    return args.run(args)


def _health(args: argparse.Namespace) -> int:
    with open_channel(args.address, args_tls(args)) as channel:
        try:
            if args.connect_only:
                grpc.channel_ready_future(channel).result(timeout=args.timeout)
                print(f"{args.address} accepts connections")
                return 0
            r = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
        except grpc.FutureTimeoutError:
            print(f"{args.address}: no connection within {args.timeout:g} s", file=sys.stderr)
            return 1
        except grpc.RpcError as e:
            print(f"{args.address}: {e.code().name} {e.details() or ''}".rstrip(), file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
    print(f"{args.address} {args.service or '(server)'} {status}")
    return 0 if r.status == health_pb2.HealthCheckResponse.SERVING else 1
