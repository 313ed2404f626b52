"""`python -m cluster drill NAME [NAME ...]`: failover drills with a checker.

Each drill starts its own local cluster (a controller, a master, two slaves) on free ports in a
fresh folder, runs producers and consumers through the RocketMQ 5 protocol, plays its fault,
drains and prints the checker's table. Exit status 0 when every drill passed.

    python -m cluster drill list
    python -m cluster drill kill-master pause-master metadata
    python -m cluster drill all              (every drill but the soak)
    python -m cluster drill soak             (a master kill every 30 s for 10 minutes)
    python -m cluster drill lagging-slave --unsafe   (unclean election on: the checker counts
                                                      the acknowledged messages it loses)
    python -m cluster drill kill-master --cluster-dir data/cluster   (a running `local`)
    python -m cluster drill kill-master kill-controller --target compose   (the running compose
                                      project `deploy`; --up brings one up and down -v after)
    python -m cluster drill gray             (the gray failures: slow-slave, slow-disk-slave,
                                              slow-link-slave, slow-slave-strict, slow-master,
                                              slow-controller)
    python -m cluster drill slow-slave --node-set haMaxSlaveAckLatency=0   (slow-member
                                      detection off: the drill must fail its rate target)
    python -m cluster drill kill-master --groups 2   (two broker groups under one controller,
                                      load on both, the fault in broker-a: broker-b must not
                                      see a failed send)
    python -m cluster drill cleanup          (firewall rules and CPU quota groups a killed
                                              drill left behind)
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile

DEFAULT_SET = ("kill-master", "pause-master", "partition-master", "partition-slave",
               "kill-controller-and-master", "restart-all", "read-only-master", "lagging-slave",
               "metadata")
COMPOSE_SET = ("kill-master", "pause-master", "partition-master", "partition-slave",
               "kill-controller", "kill-controller-and-master", "restart-all")
GRAY_SET = ("slow-slave", "slow-disk-slave", "slow-link-slave", "slow-slave-strict",
            "slow-master", "slow-controller")


def register(sub) -> None:
    p = sub.add_parser("drill", help="failover drills with a consistency checker")
    p.add_argument("names", nargs="+", metavar="NAME",
                   help="drill names, 'all', 'list' or 'cleanup'")
    p.add_argument("--dir", help="keep every drill's cluster data and history under this folder "
                                 "(default: a temporary folder, removed when the drill passed)")
    p.add_argument("--base-port", type=int, default=0, help="first port (default: free ports)")
    p.add_argument("--cluster-dir", help="drill a running `python -m cluster local` (its folder) "
                                         "instead of starting a cluster; drills that need "
                                         "partitions, a failpoint or another role refuse")
    p.add_argument("--target", choices=("local", "compose"), default="local",
                   help="local: processes on this host (default); compose: the containers of "
                        "a deploy/docker-compose.yml project")
    p.add_argument("--project", default="deploy",
                   help="with --target compose: the compose project name (default: deploy, "
                        "what docker-compose in deploy/ calls it)")
    p.add_argument("--compose-file", help="with --target compose: the compose file "
                                          "(default: deploy/docker-compose.yml)")
    p.add_argument("--up", action="store_true",
                   help="with --target compose: build the images, bring the project up first "
                        "and 'down -v' it at the end")
    p.add_argument("--warmup", type=float, default=4.0, help="seconds of load before the fault")
    p.add_argument("--fault-seconds", type=float, default=8.0,
                   help="how long a pause, partition or read-only disk lasts")
    p.add_argument("--after", type=float, default=6.0, help="seconds of load after the repair")
    p.add_argument("--soak-minutes", type=float, default=10.0)
    p.add_argument("--soak-every", type=float, default=30.0, help="seconds between soak kills")
    p.add_argument("--rate", type=float, default=60.0, help="sends per second per producer "
                                                             "(the gray drills send closed-loop)")
    p.add_argument("--slow-seconds", type=float, default=30.0,
                   help="how long a gray drill's node stays slow (default 30)")
    p.add_argument("--node-set", action="append", default=[], metavar="KEY=VALUE",
                   help="one more broker.conf key for every node a drill starts (repeatable), "
                        "e.g. haMaxSlaveAckLatency=0 to turn slow-member detection off, or "
                        "duplicateWindowSeconds=0 to watch retried sends stored twice")
    p.add_argument("--official-producers", type=int, default=0, metavar="N",
                   help="also N producers of the official RocketMQ 5 Python client "
                        "(rocketmq-python-client, in a process of its own, given every node's "
                        "address): the report gives each client's view of every failover "
                        "(default 0; a local soak takes 4 when the client is installed); the "
                        "gray drills' closed-loop load is then sent by these instead of the "
                        "project's own four producers")
    p.add_argument("--official-consumers", type=int, default=0, metavar="N",
                   help="also N SimpleConsumers of the official client in a group of their "
                        "own, which must receive every acknowledged message too (default 0; "
                        "a local soak takes 2 when the client is installed)")
    p.add_argument("--unsafe", action="store_true",
                   help="allow unclean elections (enableElectUncleanMaster=true): shows what the "
                        "protection prevents")
    p.add_argument("--groups", type=int, default=1, metavar="N",
                   help="broker groups under the one controller (default 1); with N > 1 the "
                        "workload's topics are created in every group, the load spreads over "
                        "every group's queues and the fault hits --fault-group only (drills "
                        "that support it: see the message for others)")
    p.add_argument("--fault-group", default="", metavar="NAME",
                   help="with --groups: the broker group the fault hits (default: the first, "
                        "broker-a)")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(run=run)


def run(args) -> int:
    from cluster.drills import partition
    from cluster.drills.compose_cluster import ComposeProject, DockerError
    from cluster.drills.runner import NotTargetable
    from cluster.drills.scenarios import DRILLS, Timing
    from cluster.drills.workload import WorkloadConfig

    names = args.names
    if names == ["list"]:
        for d in DRILLS.values():
            print(f"{d.name:<28} {d.about}")
        return 0
    if names == ["cleanup"]:
        from cluster.drills import cpu_quota
        removed = partition.remove_leftovers()
        print(f"removed {len(removed)} firewall chain(s) and rule(s)"
              + (f": {', '.join(removed)}" if removed else ""))
        groups = cpu_quota.remove_leftovers() if os.geteuid() == 0 else []
        print(f"removed {len(groups)} CPU quota group(s)" + (f": {', '.join(groups)}"
                                                             if groups else ""))
        return 0
    if names == ["all"]:
        names = list(COMPOSE_SET if args.target == "compose" else DEFAULT_SET)
    if names == ["gray"]:
        names = list(GRAY_SET)
    try:
        node_props = dict(_key_value(item) for item in args.node_set)
    except ValueError as e:
        print(f"--node-set: {e}", file=sys.stderr)
        return 2
    if node_props and (args.cluster_dir or args.target == "compose"):
        print("--node-set configures the nodes a drill starts: not with --cluster-dir or "
              "--target compose", file=sys.stderr)
        return 2
    unknown = [n for n in names if n not in DRILLS]
    if unknown:
        print(f"unknown drill(s): {', '.join(unknown)} (see: python -m cluster drill list)",
              file=sys.stderr)
        return 2
    refusal = _target_refusal(args, names, DRILLS) or _groups_refusal(args, names, DRILLS)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    if args.cluster_dir:
        if args.unsafe:
            print("--unsafe changes the controller's config: not with --cluster-dir",
                  file=sys.stderr)
            return 2
        fixed = [n for n in names if not DRILLS[n].targetable]
        if fixed:
            print(f"drill(s) {', '.join(fixed)} need a cluster they start themselves "
                  f"(partitions, a failpoint or another master role): drop --cluster-dir",
                  file=sys.stderr)
            return 2
    timing = Timing(warmup_s=args.warmup, fault_s=args.fault_seconds, after_s=args.after,
                    soak_s=args.soak_minutes * 60, soak_every_s=args.soak_every,
                    gray_fault_s=args.slow_seconds)
    producers, consumers = args.official_producers, args.official_consumers
    if (producers == consumers == 0 and "soak" in names and args.target == "local"
            and _official_client_installed()):
        producers, consumers = 4, 2
    workload = WorkloadConfig(rate=args.rate, official_producers=producers,
                              official_consumers=consumers)
    controller_props = {"enableElectUncleanMaster": "true"} if args.unsafe else {}
    # SIGTERM (timeout, a CI job cancelled, kill) unwinds like Ctrl-C: the drill's clusters,
    # firewall rules and CPU quotas are taken down by the code that set them up
    signal.signal(signal.SIGTERM, _terminated)
    parent = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="rmq-drill-")
    compose = None
    if args.target == "compose":
        try:
            compose = ComposeProject(args.project, args.compose_file)
            if args.up:
                print(f"building the images and bringing compose project {args.project} up",
                      file=sys.stderr, flush=True)
                compose.build()
                compose.up()
        except DockerError as e:
            print(f"drill --target compose: {e}", file=sys.stderr)
            if compose is not None and args.up:
                compose.down()
            return 1
    try:
        return _run_drills(args, names, parent, timing, workload, controller_props, compose,
                           node_props)
    except DockerError as e:  # a service missing from the project, docker refusing a step
        print(f"drill --target compose: {e}", file=sys.stderr)
        return 1
    except NotTargetable as e:  # e.g. --cluster-dir with fewer groups than --groups
        print(f"drill: {e}", file=sys.stderr)
        return 2
    finally:
        if compose is not None and args.up:
            compose.down()


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _gray_workload(gray, workload):
    """The gray drills' closed-loop load; with --official-producers N, N producers of the
    official client send it instead of the project's own four (issue 49 measured with four
    official producers)."""
    if workload.official_producers:
        return dataclasses.replace(gray, producers=0,
                                   official_producers=workload.official_producers,
                                   official_consumers=workload.official_consumers)
    return dataclasses.replace(gray, official_consumers=workload.official_consumers)


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{item!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def _official_client_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("rocketmq") is not None


def _target_refusal(args, names: list[str], drills) -> str:
    """Why these options cannot run these drills ("" when they can)."""
    if args.target != "compose":
        need_compose = [n for n in names if not drills[n].local]
        if args.up or args.compose_file:
            return "--up and --compose-file go with --target compose"
        if need_compose:
            return (f"drill(s) {', '.join(need_compose)} need two controllers: "
                    f"--target compose")
        return ""
    if args.cluster_dir or args.unsafe:
        return "--target compose drills the project as deployed: no --cluster-dir or --unsafe"
    local_only = [n for n in names if not drills[n].compose]
    if local_only:
        supported = ", ".join(d.name for d in drills.values() if d.compose)
        return (f"drill(s) {', '.join(local_only)} run against local processes only; "
                f"--target compose supports {supported}")
    return ""


def _groups_refusal(args, names: list[str], drills) -> str:
    """Why --groups/--fault-group cannot run these drills ("" when they can)."""
    from cluster.assembly.local_layout import MAX_GROUPS, group_names

    if not 1 <= args.groups <= MAX_GROUPS:
        return f"--groups {args.groups}: want 1..{MAX_GROUPS} broker groups"
    if args.groups == 1:
        return "--fault-group goes with --groups N (N > 1)" if args.fault_group else ""
    unsupported = [n for n in names if not drills[n].groups]
    if unsupported:
        supported = ", ".join(d.name for d in drills.values() if d.groups)
        return (f"drill(s) {', '.join(unsupported)} do not run with several broker groups "
                f"(the fault is not inside one group, or nodes are set up by name); "
                f"--groups supports {supported}")
    if args.fault_group and not args.cluster_dir:
        known = group_names(args.groups)
        wanted = args.fault_group if args.fault_group in known else f"broker-{args.fault_group}"
        if wanted not in known:
            return (f"--fault-group {args.fault_group!r}: not one of {', '.join(known)}")
        args.fault_group = wanted
    return ""


def _run_drills(args, names, parent, timing, workload, controller_props, compose,
                node_props) -> int:
    from cluster.drills.report import (group_rows, phase_rows, render_client_view,
                                       render_detail, render_groups, render_phases,
                                       render_table, summary_row)
    from cluster.drills.runner import GRAY_WORKLOAD, DrillOptions, run_drill
    from cluster.drills.scenarios import DRILLS
    from cluster.assembly.local_cluster import free_base_port

    rows, details, ok = [], [], True
    for name in names:
        drill = DRILLS[name]
        root = os.path.join(parent, name)
        if os.path.exists(root):
            shutil.rmtree(root)
        print(f"drill {name}: {drill.about} (data under {root})", file=sys.stderr, flush=True)
        run_ = run_drill(drill, DrillOptions(
            root=root, base_port=args.base_port or free_base_port(args.groups), timing=timing,
            groups=args.groups, fault_group=args.fault_group,
            workload=workload, controller_props=controller_props,
            target_dir=args.cluster_dir, compose=compose, node_props=node_props,
            gray_workload=_gray_workload(GRAY_WORKLOAD, workload)))
        rows.append(summary_row(name, run_.result, recovers=drill.recovers))
        details.append((run_, render_detail(name, run_.result)))
        ok = ok and run_.result.passed
        if run_.result.passed and not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if not args.dir and ok:
        shutil.rmtree(parent, ignore_errors=True)
    if args.json:
        print(json.dumps([{**row, "notes": list(r.notes), "failures": list(r.result.failures),
                           "recovery_s": list(r.result.recovery_s),
                           "client_gaps_s": {c: list(g) for c, g
                                             in r.result.client_gaps.items()},
                           "stored_duplicates": r.result.stored_duplicates,
                           "copies_in_other_groups": r.result.copies_in_other_groups,
                           "groups": group_rows(r.result),
                           "phases": [{"fault": fp.fault, "windows": phase_rows(fp)}
                                      for fp in r.result.phases],
                           "seconds": round(r.seconds, 1)}
                          for row, (r, _) in zip(rows, details)], indent=2))
    else:
        print(render_table(rows, markdown=args.markdown))
        for r, detail in details:
            for note in r.notes:
                print(f"  {r.drill.name}: {note}")
            print(render_client_view(r.drill.name, r.result))
            by_group = render_groups(r.drill.name, r.result, markdown=args.markdown)
            if by_group:
                print(by_group)
            if r.drill.gray:
                print(render_phases(r.drill.name, r.result, markdown=args.markdown))
            if not r.result.passed:
                print(detail)
                print(f"  history: {r.history_path}")
    return 0 if ok else 1
