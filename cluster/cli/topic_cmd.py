"""`python -m cluster topic list|route|create|update|delete` (mqadmin topicList / topicRoute /
updateTopic / deleteTopic). Changes go to the master; `list --node/--address` works on any node
(a slave shows its copy).

Several broker groups (`cluster local --groups N`): the controller's route registry is the
cluster's view. `topic list` (without --node, --address or --offsets, when a controller is
known: the cluster folder's or --controller) and `topic route NAME` show it: each topic's
queues and permissions per group as clients get them (a group without a master now routes its
queues read-only), and which group has no master. `topic create NAME --groups all|a,b` creates
the topic in each named group through that group's master (mqadmin updateTopic -c/-b); every
group is checked first (it exists, it has a master, it lacks the topic), so a refusal creates
nothing anywhere.
"""
from __future__ import annotations

import argparse
import sys

import grpc

from proto import admin_pb2 as pb
from proto import controller_pb2 as cpb

from common.config_values import arg_bool, arg_int
from store.json_config import MAX_QUEUE_NUMS

from cluster.admin.topic_admin import perm_name, topic_kind
from cluster.cli.commands import answer, command, group
from cluster.cli.output import print_json, refused, table, to_dict
from cluster.cli.targets import (CURRENT_MASTER, DEFAULT_CLUSTER_DIR, add_tls_args,
                                 controller_target, operator)
from cluster.assembly.group_topics import (GroupCallError, GroupTopicError, create_in_groups,
                                           parse_groups, wait_routed)
from cluster.assembly.local_cluster import ClusterFolderError, read_cluster_info
from cluster.client.controller_client import ControllerClient
from cluster.config.cluster_route import ClusterRoute, routed_config
from cluster.controller.route_wire import route_from_pb

PERMS = {"W": 2, "R": 4, "RW": 6, "2": 2, "4": 4, "6": 6}
QUEUES = arg_int(1, MAX_QUEUE_NUMS)


def _perm(text: str) -> int:
    """--perm RW|R|W or RocketMQ's numbers 6|4|2."""
    value = PERMS.get(text.upper())
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r}: want RW, R or W (or 6, 4, 2)")
    return value


def register(sub) -> None:
    topic = group(sub, "topic", "list, route, create, update and delete topics")
    ls = command(topic, "list", "topics with queue counts and permissions (the cluster's, "
                 "from the controller; a node's with --node/--address)",
                 answer(lambda client, args: client.list_topics(
                     include_system=args.system, with_offsets=args.offsets, topic=args.topic),
                     _show_list), node=None, prefix="topic")
    ls.add_argument("--topic", default="", help="only this topic")
    ls.add_argument("--offsets", action="store_true",
                    help="min/max offset of every queue (a node's view)")
    ls.add_argument("--system", action="store_true", help="also the broker's system topics")
    _controller_args(ls)
    _or_cluster_view(ls, _list_cluster)
    rt = topic.add_parser("route", help="a topic's queues per broker group, as clients get them",
                          description="A topic's route from the controller: every group that "
                                      "has it, its master, its queues and their permissions "
                                      "(read-only while the group has no master)")
    rt.add_argument("name")
    rt.add_argument("--cluster-dir", default=DEFAULT_CLUSTER_DIR)
    rt.add_argument("--token-file", help="the admin token (default: the folder's)")
    rt.add_argument("--json", action="store_true", help="print JSON for scripts")
    _controller_args(rt)
    add_tls_args(rt)
    rt.set_defaults(run=_route, parser=rt, what="topic route")
    for name, call, help in (
            ("create", lambda client, args: client.create_topic(args.name, **_fields(args)),
             "create a topic (on the master; --groups: on each group's master)"),
            ("update", lambda client, args: client.update_topic(args.name, **_fields(args)),
             "change a topic's queue counts, perm or order")):
        p = command(topic, name, help, answer(call, _show_changed(name)), prefix="topic")
        p.add_argument("name")
        p.add_argument("--queues", type=QUEUES,
                       help=f"read and write queue count (1..{MAX_QUEUE_NUMS})")
        p.add_argument("--read-queues", type=QUEUES, help=f"read queue count (1..{MAX_QUEUE_NUMS})")
        p.add_argument("--write-queues", type=QUEUES,
                       help=f"write queue count (1..{MAX_QUEUE_NUMS})")
        p.add_argument("--perm", type=_perm, help="RW (default), R or W")
        p.add_argument("--order", type=arg_bool, help="true or false")
    create = topic.choices["create"]
    create.add_argument("--groups", metavar="all|a,b",
                        help="create it in these broker groups (all, or names: broker-a or a), "
                             "each through its master, found by the controller; then wait "
                             "until every live node routes it there")
    create.add_argument("--route-wait", metavar="SECONDS", type=float, default=15.0,
                        help="with --groups: how long to wait for every live node to route "
                             "the topic in every group (0: do not wait; default 15)")
    _controller_args(create)
    single = create.get_default("run")
    create.set_defaults(run=lambda args: _create_in_groups(args) if args.groups
                        else single(args))
    rm = command(topic, "delete", "remove a topic from the table (data stays until retention)",
                 answer(lambda client, args: client.delete_topic(args.name),
                        lambda r, args: print(f"deleted topic {r.deleted.name}: {r.note}")),
                 prefix="topic")
    rm.add_argument("name")


def _controller_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--controller", help="host:port of the controller (default: the folder's)")


def _or_cluster_view(p: argparse.ArgumentParser, cluster_view) -> None:
    """`list` shows the controller's view unless a node is named (or node data is asked
    for), or no controller is known."""
    node_view = p.get_default("run")

    def run(args) -> int:
        if args.node or args.address or args.offsets or not _has_controller(args):
            args.node = args.node or CURRENT_MASTER
            return node_view(args)
        return cluster_view(args)
    p.set_defaults(run=run)


def _has_controller(args) -> bool:
    if args.controller:
        return True
    try:
        return "controller" in read_cluster_info(args.cluster_dir)
    except ClusterFolderError:
        return False


def _fields(args) -> dict:
    return {"queue_nums": args.queues, "read_queue_nums": args.read_queues,
            "write_queue_nums": args.write_queues, "perm": args.perm, "order": args.order}


# -- the controller's view ------------------------------------------------------------------
def _cluster_route(args) -> tuple[ClusterRoute, cpb.GroupsView] | None:
    """The controller's route (and its view of the groups); None after printing why not."""
    address, token, tls = controller_target(args.parser, args.cluster_dir, args.controller,
                                            args.token_file, args)
    with ControllerClient(address, token, timeout=10, tls=tls) as client:
        try:
            view = client.groups()
        except grpc.RpcError as e:
            refused(args.what, e)
            return None
    return route_from_pb(view.route), view


def _list_cluster(args) -> int:
    got = _cluster_route(args)
    if got is None:
        return 1
    route, view = got
    rows = []
    for g in route.groups:
        for t in g.topics.values():
            if args.topic and t.topic_name != args.topic:
                continue
            if topic_kind(t.topic_name) == "SYSTEM" and not args.system and not args.topic:
                continue
            routed = routed_config(t, g.has_master)
            rows.append({"topic": t.topic_name, "group": g.broker_name,
                         "read_queue_nums": t.read_queue_nums,
                         "write_queue_nums": t.write_queue_nums, "perm": perm_name(t.perm),
                         "routed_perm": perm_name(routed.perm), "order": t.order,
                         "kind": topic_kind(t.topic_name),
                         "master": g.master_id or ""})
    rows.sort(key=lambda r: (r["topic"], r["group"]))
    if args.json:
        print_json({"route_version": route.version, "topics": rows,
                    "groups": [_group_json(g) for g in route.groups]})
        return 0
    table(("topic", "group", "read", "write", "perm", "routed", "order", "kind", "master"),
          [(r["topic"], r["group"], r["read_queue_nums"], r["write_queue_nums"], r["perm"],
            r["routed_perm"], r["order"], r["kind"], r["master"] or "NONE") for r in rows])
    _print_groups(route)
    print(f"\n{len({r['topic'] for r in rows})} topic(s) in {len(route.groups)} group(s); "
          f"route version {route.version} (controller {view.controller_address})")
    return 0


def _route(args) -> int:
    got = _cluster_route(args)
    if got is None:
        return 1
    route, _ = got
    holding = route.holding(args.name)
    if args.json:
        print_json({"topic": args.name, "route_version": route.version, "groups": [
            {**_group_json(g), "read_queue_nums": t.read_queue_nums,
             "write_queue_nums": t.write_queue_nums, "perm": perm_name(t.perm),
             "routed_perm": perm_name(routed_config(t, g.has_master).perm),
             "queues": _queue_perms(routed_config(t, g.has_master))}
            for g, t in holding]})
        return 0 if holding else 1
    if not holding:
        print(f"topic {args.name} is in no broker group the controller knows "
              f"({', '.join(g.broker_name for g in route.groups) or 'none'})")
        return 1
    rows = []
    for g, t in holding:
        routed = routed_config(t, g.has_master)
        queues = ", ".join(f"{q}:{p}" for q, p in _queue_perms(routed))
        rows.append((g.broker_name, g.master_id or "NONE", t.read_queue_nums,
                     t.write_queue_nums, perm_name(routed.perm), queues, ",".join(g.endpoints)))
    table(("group", "master", "read", "write", "perm", "queues", "endpoints"), rows)
    _print_groups(route, [g for g, _ in holding])
    return 0


def _queue_perms(config) -> list[tuple[int, str]]:
    """Each queue id with its permission as a route gives it (R, W, RW or -)."""
    out = []
    for q in range(max(config.read_queue_nums, config.write_queue_nums)):
        read = config.readable and q < config.read_queue_nums
        write = config.writable and q < config.write_queue_nums
        out.append((q, ("R" if read else "") + ("W" if write else "") or "-"))
    return out


def _group_json(g) -> dict:
    return {"group": g.broker_name, "master": g.master_id, "master_address": g.master_address,
            "has_master": g.has_master, "note": g.note, "endpoints": list(g.endpoints),
            "registered": g.registered}


def _print_groups(route: ClusterRoute, groups=None) -> None:
    for g in groups if groups is not None else route.groups:
        if not g.has_master:
            print(f"\ngroup {g.broker_name} has NO MASTER now: its queues are read-only"
                  f"{': ' + g.note if g.note else ''}")
        elif not g.registered:
            print(f"\ngroup {g.broker_name}: its master has not registered its topics with "
                  f"this controller yet (it does at its next heartbeat)")


# -- create in several groups --------------------------------------------------------------
def _create_in_groups(args) -> int:
    got = _cluster_route(args)
    if got is None:
        return 1
    route, _ = got
    known = [g.broker_name for g in route.groups]
    try:
        names = parse_groups(args.groups, known)
    except ValueError as e:
        args.parser.error(str(e))
    address, token, tls = controller_target(args.parser, args.cluster_dir, args.controller,
                                            args.token_file, args)
    try:
        created = create_in_groups(route, names, token, args.name, _fields(args), tls=tls,
                                   operator=operator())
    except GroupTopicError as e:
        print(f"topic create: {e}: nothing created", file=sys.stderr)
        return 1
    except GroupCallError as e:
        return refused(f"topic create in {e.group}", e.error)
    missing = wait_routed(address, token, args.name, names, args.route_wait, tls=tls) \
        if args.route_wait > 0 else ["not waited for (--route-wait 0)"]
    if args.json:
        print_json({"topic": args.name, "groups": {n: to_dict(t) for n, t in created},
                    "routed_by_every_node": not missing, "not_routed": missing})
        return 0
    print(f"created topic {args.name} in {len(created)} group(s)")
    if not missing:
        print("every live node routes it in every group")
    elif args.route_wait > 0:
        print(f"not routed everywhere after {args.route_wait:g} s (nodes take a new route at "
              f"their next heartbeat; a client asking one of them now is told of the groups "
              f"it knew): {'; '.join(missing)}", file=sys.stderr)
    table(("group", "topic", "read", "write", "perm", "order"),
          [(n, t.name, t.read_queue_nums, t.write_queue_nums, t.perm_name, t.order)
           for n, t in created])
    return 0


def _show_changed(verb: str):
    def show(t: pb.TopicInfo, args) -> None:
        print(f"{verb}d topic {t.name}")
        table(("topic", "read", "write", "perm", "order", "kind"),
              [(t.name, t.read_queue_nums, t.write_queue_nums, t.perm_name, t.order, t.kind)])
    return show


def _show_list(r, args) -> None:
    headers = ["topic", "read", "write", "perm", "order", "kind", "configured"]
    if args.offsets:
        headers.append("messages")
    rows = []
    for t in r.topics:
        row = [t.name, t.read_queue_nums if t.configured else "-",
               t.write_queue_nums if t.configured else "-", t.perm_name, t.order, t.kind,
               t.configured]
        rows.append(row + ([t.messages] if args.offsets else []))
    table(headers, rows)
    if args.offsets:
        for t in r.topics:
            if t.queues:
                print(f"\n{t.name}")
                table(("queue", "min", "max", "messages"),
                      [(q.queue_id, q.min_offset, q.max_offset, q.max_offset - q.min_offset)
                       for q in t.queues], indent="  ")
    print(f"\n{len(r.topics)} topic(s); topic table version {r.data_version_counter}")
