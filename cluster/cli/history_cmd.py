"""`python -m cluster history ...`: the commitlog archive's historical queries.

    history holdings                  what each archive holds: groups, files, time ranges
    history query --topic T --key K | --id ID | --begin/--end [--group G]
    history reconsume --id ID ... --to host:port [--topic NEW]
    history ship --node slave1 [--up-to OFFSET]   ship sealed files now, whatever their age
    history search ...                every archived file scanned with Spark (history_search_cmd)

Which archives: `--archive host:port --token-file F` (repeatable --archive, one token), or the
registry of archives (`--registry FILE`, default <cluster-dir>/archives.json of a `cluster
local --archive` folder), or the archives a controller was told of (`--controller host:port`,
or the cluster folder's controller when there is no registry file): a time-range query asks
only the archives whose announced range meets it, an id or key lookup asks every archive;
each archive's token is read from the token_file it announced, else from --token-file (which
is also the controller's token). Answers are merged by store
time; the same message held by two chained archives is shown once.
"""
from __future__ import annotations

import argparse
import os

import grpc

from proto import admin_pb2 as admin_pb

from cluster.archive.registry import ArchiveEntry, read_registry
from cluster.client.archive_client import ArchiveClient
from cluster.client.controller_client import ControllerClient
from cluster.cli import history_search_cmd
from cluster.cli.commands import answer, command
from cluster.cli.message_cmd import print_record
from cluster.cli.output import fmt_ms, print_json, refused, table, to_dict
from cluster.cli.targets import add_tls_args, client_tls
from cluster.cli.timeparse import parse_time_ms
from cluster.assembly.local_cluster import ClusterFolderError, read_cluster_info
from cluster.security.tls import ClientTls

DEFAULT_CLUSTER_DIR = "data/cluster"
REGISTRY = "archives.json"


def register(sub) -> None:
    p = sub.add_parser("history", help="query the commitlog archive (docs: The archive)",
                       description=__doc__.splitlines()[0])
    inner = p.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    h = inner.add_parser("holdings", help="groups, files and time ranges of each archive")
    _targets(h)
    h.set_defaults(run=_holdings)
    q = inner.add_parser("query", help="archived messages by --id, --key or --begin/--end")
    _targets(q)
    q.add_argument("--group", default="", help="one broker group (default: every group)")
    q.add_argument("--topic", default="", help="needed for --key and time ranges")
    what = q.add_mutually_exclusive_group()
    what.add_argument("--id", default="", help="offset message id or client message id")
    what.add_argument("--key", default="", help="a message key (KEYS) or UNIQ_KEY")
    q.add_argument("--begin", type=parse_time_ms, default=0, metavar="TIME")
    q.add_argument("--end", type=parse_time_ms, default=0, metavar="TIME")
    q.add_argument("--max", type=int, default=32, help="at most this many per archive (1..1024)")
    q.add_argument("--full", action="store_true", help="print every field of each message")
    q.set_defaults(run=_query)
    r = inner.add_parser("reconsume", help="send archived messages back to a live cluster")
    _targets(r)
    r.add_argument("--group", default="")
    r.add_argument("--id", action="append", required=True, dest="ids",
                   help="message id to send again (repeatable)")
    r.add_argument("--to", required=True, metavar="HOST:PORT",
                   help="a node of the live cluster (its RocketMQ 5 client port)")
    r.add_argument("--topic", default="", help="send to this topic (default: the original)")
    r.set_defaults(run=_reconsume)
    search = history_search_cmd.add_parser(inner)
    search.set_defaults(run=history_search_cmd.run)
    ship = command(inner, "ship", "ship a node's sealed commitlog files to the archive now, "
                   "whatever their age (a slave by default: the nodes that ship)",
                   answer(_ship, _show_ship), node="slave1", prefix="history")
    ship.add_argument("--up-to", type=int, default=0, metavar="OFFSET",
                      help="only files below this commitlog offset (default: every sealed file)")
    ship.add_argument("--wait-ms", type=int, default=0, help="wait this long for the acks "
                                                             "(default 30000)")


def _ship(client, args):
    return client.ship_to_archive(args.up_to, args.wait_ms)


def _show_ship(r, args) -> int:
    state = "done" if r.done else "not yet (still shipping: ask again)"
    print(f"archived up to {r.archived_up_to} of {r.requested_up_to}: {state}; this node shipped "
          f"{r.files_shipped} file(s), {r.raw_bytes} bytes as {r.sent_bytes}"
          + (f"; {r.refused} refused by the archive (see the node's log)" if r.refused else ""))
    return 0 if r.done else 1


def _targets(p: argparse.ArgumentParser) -> None:
    p.add_argument("--archive", action="append", default=[], metavar="HOST:PORT",
                   help="an archive server (repeatable); default: the registry's archives")
    p.add_argument("--registry", default="", metavar="FILE",
                   help=f"the registry of archives (default <cluster-dir>/{REGISTRY})")
    p.add_argument("--controller", default="", metavar="HOST:PORT",
                   help="ask this controller which archives there are (default: the cluster "
                        "folder's, when there is no registry file)")
    p.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR)
    p.add_argument("--token-file", default="", help="the archives' admin token")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    add_tls_args(p)
    p.set_defaults(parser=p)


def _archives(args, begin: int = 0, end: int = 0, group: str = "") -> list[ArchiveEntry]:
    """The archives to ask: --archive; else the registry file; else what a controller was told
    (--controller, or the cluster folder's). For a time range only those whose range meets it."""
    if args.archive:
        return [ArchiveEntry(a, a, "", {}, 0, args.token_file) for a in args.archive]
    path = args.registry or os.path.join(args.cluster_dir, REGISTRY)
    if args.controller or not (args.registry or os.path.exists(path)):
        entries, where = _from_controller(args), "the controller"
    else:
        try:
            entries, where = read_registry(path), path
        except ValueError as e:
            args.parser.error(str(e))
    if not entries:
        args.parser.error(f"no archives: {where} lists none (give --archive HOST:PORT, "
                          f"--registry FILE or --controller HOST:PORT)")
    if begin or end:
        entries = [e for e in entries if e.may_hold(group, begin, end or 2 ** 62)]
    return entries


def _from_controller(args) -> list[ArchiveEntry]:
    """The archives announced to the controller (its admin token: --token-file, else the
    cluster folder's)."""
    try:
        info = read_cluster_info(args.cluster_dir)
    except ClusterFolderError:
        info = {}
    address = args.controller or info.get("controller", {}).get("address", "")
    token_file = args.token_file or info.get("token_file", "")
    if not address:
        args.parser.error("no archives: no registry file and no controller (give --archive "
                          "HOST:PORT, --registry FILE or --controller HOST:PORT)")
    with ControllerClient(address, _read_token(args, token_file), tls=_tls(args)) as client:
        try:
            listed = client.archives().archives
        except grpc.RpcError as e:
            raise SystemExit(refused(f"history (controller {address})", e))
    return [ArchiveEntry(a.archive_id, a.address, a.http_address,
                         {g.broker_group: (g.first_store_timestamp, g.last_store_timestamp)
                          for g in a.groups}, 0, a.token_file) for a in listed]


def _read_token(args, path: str) -> str:
    if not path:
        args.parser.error("no admin token: give --token-file")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError as e:
        args.parser.error(f"cannot read the token file {path}: {e}")


def _client(args, entry: ArchiveEntry) -> ArchiveClient:
    token = _read_token(args, entry.token_file or args.token_file)
    return ArchiveClient(entry.address, token, _tls(args))


def _tls(args) -> ClientTls | None:
    """--tls-ca, else a `cluster local --tls` folder's CA (cluster.json), else plaintext."""
    try:
        info = read_cluster_info(args.cluster_dir)
    except ClusterFolderError:
        info = None
    return client_tls(args, info)


def _holdings(args) -> int:
    out = []
    for entry in _archives(args):
        with _client(args, entry) as client:
            try:
                out.append(client.holdings())
            except grpc.RpcError as e:
                return refused(f"history holdings ({entry.address})", e)
    if args.json:
        print_json(out)
        return 0
    rows = []
    for h in out:
        for g in h.groups:
            size = sum(f.file_size for f in g.files)
            rows.append((h.archive_id, g.broker_group, len(g.files),
                         sum(f.records for f in g.files), f"{size / (1 << 20):.0f} MiB",
                         fmt_ms(g.first_store_timestamp), fmt_ms(g.last_store_timestamp)))
    table(("archive", "group", "files", "messages", "size", "first stored", "last stored"), rows)
    return 0


def _query(args) -> int:
    if not (args.id or args.key or args.begin or args.end):
        args.parser.error("give --id, --key or --begin/--end")
    if (args.key or args.begin or args.end) and not args.topic and not args.id:
        args.parser.error("--key and time ranges need --topic")
    if not 1 <= args.max <= 1024:
        args.parser.error("--max must be 1..1024")
    req = admin_pb.QueryMessagesRequest(topic=args.topic, key=args.key, msg_id=args.id,
                                        max_count=args.max, begin_timestamp_ms=args.begin,
                                        end_timestamp_ms=args.end,
                                        omit_body=not args.full and not args.json)
    found: dict[tuple[str, int], tuple[str, admin_pb.Message]] = {}
    truncated = False
    for entry in _archives(args, args.begin, args.end, args.group):
        with _client(args, entry) as client:
            try:
                r = client.query(req, args.group)
            except grpc.RpcError as e:
                return refused(f"history query ({entry.address})", e)
        truncated |= r.truncated
        for m in r.messages:  # chained archives may both hold a message: show it once
            found.setdefault((m.msg_id, m.commit_log_offset), (entry.archive_id, m))
    rows = sorted(found.values(), key=lambda am: (am[1].store_timestamp,
                                                  am[1].commit_log_offset),
                  reverse=bool(args.key))
    if args.json:
        print_json([m for _, m in rows])
        return 0
    if args.full:
        for _, m in rows:
            print_record(m, "text")
    else:
        table(("archive", "topic", "queue", "offset", "stored", "msg id", "unique key", "tags",
               "keys", "size"),
              [(a, m.topic, m.queue_id, m.queue_offset, fmt_ms(m.store_timestamp), m.msg_id,
                m.unique_key, m.tags, m.keys, m.body_size) for a, m in rows])
    more = " (more matched: raise --max or narrow the range)" if truncated else ""
    print(f"\n{len(rows)} archived message(s){more}")
    return 0


def _reconsume(args) -> int:
    left = list(dict.fromkeys(args.ids))
    results = []
    for entry in _archives(args):
        if not left:
            break
        with _client(args, entry) as client:
            try:
                r = client.reconsume(left, args.to, args.topic, args.group)
            except grpc.RpcError as e:
                return refused(f"history reconsume ({entry.address})", e)
        results += list(r.results)
        left = list(r.not_found)  # the next archive is asked only for what this one lacked
    if args.json:
        print_json({"results": [to_dict(x) for x in results], "not_found": left})
    else:
        table(("new message id", "queue offset"), [(x.msg_id, x.queue_offset) for x in results])
        print(f"\n{len(results)} message(s) sent to {args.to}"
              + (f"; not found in any archive: {', '.join(left)}" if left else ""))
    return 0 if not left else 1

