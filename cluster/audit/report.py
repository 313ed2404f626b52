"""Output of an audit: the JSON report, the terminal summary and the lag chart (PNG)."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone

from common.text_output import format_table

from cluster.audit.groups import counts as cluster_counts
from cluster.audit.metadata import group_lag
from cluster.audit.model import ERROR, INFO, KINDS, SEVERITIES, WARNING, AuditResult

_RANK = {ERROR: 0, WARNING: 1, INFO: 2}


def build(result: AuditResult, layouts, timings: dict) -> dict:
    """The JSON-ready report. `layouts` add index headers, notes and file counts per replica."""
    by_name = {lay.name: lay for lay in layouts}
    ref_queues = {(q["topic"], q["queue_id"]): q["max_offset"]
                  for q in result.queues if q["replica"] == result.reference}
    queues = [{**q, "lag": ref_queues.get((q["topic"], q["queue_id"]), 0) - q["max_offset"]}
              for q in result.queues]
    totals = {s: 0 for s in SEVERITIES}
    by_kind: dict[str, dict[str, int]] = {}
    by_replica: dict[str, dict[str, dict[str, int]]] = {}
    truncated = False
    shown: dict[tuple, int] = {}
    for f in result.examples:
        key = (f["replica"], f["kind"], f["severity"])
        shown[key] = shown.get(key, 0) + 1
    for (rep, kind, sev), n in sorted(result.counts.items()):
        totals[sev] += n
        by_kind.setdefault(kind, {})[sev] = by_kind.get(kind, {}).get(sev, 0) + n
        by_replica.setdefault(rep, {}).setdefault(kind, {})[sev] = n
        truncated |= shown.get((rep, kind, sev), 0) < n
    replicas = []
    for s in result.replicas:
        lay = by_name[s["name"]]
        replicas.append({**s, "index_files": lay.index, "cq_files": len(lay.cq_files),
                         "consumer_groups": len(lay.consumer_offsets),
                         "unclean_shutdown": lay.unclean, "notes": lay.notes})
    findings = sorted(result.examples, key=lambda f: (_RANK[f["severity"]], f["replica"], f["kind"],
                                                      -1 if f["offset"] is None else f["offset"]))
    exit_status = 1 if totals[ERROR] else 0
    return {"tool": "cluster.audit", "version": 1,
            "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "exit_status": exit_status, "verdict": "errors found" if exit_status else "ok",
            "reference": result.reference, "replicas": replicas,
            "counts": {**totals, "by_kind": by_kind, "by_replica": by_replica},
            "findings": findings, "findings_truncated": truncated, "queues": queues,
            "consumer_lag": {"replica": result.reference, "groups": group_lag(result.consumers),
                             "queues": result.consumers},
            "metadata": result.metadata, "scan": result.scan, "timings": timings}


def write_json(report: dict, path: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _table(headers: list[str], rows: list[list]) -> list[str]:
    """The first column left-aligned, the others right-aligned; None shows as "None"."""
    return format_table(headers, [[str(x) for x in r] for r in rows], right=range(1, len(headers)))


def _describe(f: dict) -> str:
    d = f["details"]
    where = f"@{f['offset']}" if f["offset"] is not None else ""
    if f["topic"] is not None:
        where += f" {f['topic']}" + (f"-{f['queue_id']}" if f["queue_id"] is not None else "")
        if f["queue_offset"] is not None:
            where += f"#{f['queue_offset']}"
    kind = f["kind"]
    if kind == "record_mismatch":
        what = f"differs in {d.get('fields')}" + (f" ({d['reason']})" if d.get("reason") else "")
    elif kind in ("diverged_tail", "missing_records"):
        what = f"{d.get('records')} records, {d.get('bytes')} bytes up to {d.get('end')}"
        if kind == "diverged_tail":
            what += f" in epoch {d.get('epoch')} (reference epoch {d.get('reference_epoch', '-')}, " \
                    f"consistent point {d.get('consistent_point')})"
    elif kind == "cq_bad_entry":
        what = d.get("problem", "")
    elif kind in ("consumer_offset_ahead", "consumer_offset_expired"):
        what = (f"group {d.get('group')}: queue [{d.get('queue_min')}, {d.get('queue_max')}) "
                f"({d.get('source')})")
    elif kind == "duplicate_key":
        what = f"{d.get('uniq_key')} x{d.get('count')} at {d.get('offsets')}"
    elif kind == "unroutable_queue":
        what = d.get("reason", "")
        if d.get("cq_max_offset") is not None:
            what += f"; consume queue [{d.get('cq_min_offset')}, {d.get('cq_max_offset')})"
    elif kind == "topic_table_mismatch":
        what = f"at {d.get('bound')}: {d.get('fields')}"
        if d.get("fields") == "dataVersion":
            what += f" {d.get('data_version')} vs reference {d.get('reference_data_version')}"
        elif d.get("config") and d.get("reference_config"):
            diff = [k for k in d["fields"].split(",")]
            what += " (" + ", ".join(f"{k} {d['config'].get(k)} vs reference "
                                     f"{d['reference_config'].get(k)}" for k in diff) + ")"
    elif kind == "consumer_offset_mismatch":
        what = (f"group {d.get('group')} at {d.get('bound')}: committed {f['queue_offset']}, "
                f"reference {d.get('reference_committed')}")
    elif kind == "table_record_bad":
        what = d.get("reason", "")
    elif kind == "queue_offset_gap":
        what = f"previous queue offset {d.get('previous_queue_offset')} at {d.get('previous_offset')}"
    else:
        what = ", ".join(f"{k}={v}" for k, v in d.items())
    return f"{where} {what}".strip()


def _metadata_lines(report: dict, max_queues: int = 5) -> list[str]:
    """The replicated tables (records, topics, groups) and the consumer lag per group."""
    lines = []
    meta = report.get("metadata") or {}
    if meta.get("replicas"):
        lines.append(f"Metadata (tables compared below the group's lowest confirm offset "
                     f"{meta.get('bound')}):")
        lines += ["  " + x for x in _table(
            ["REPLICA", "TOPIC_RECORDS", "TOPICS", "STATE_RECORDS", "GROUPS", "GROUP_QUEUES"],
            [[name, m["topic_table_records"], m["topics"], m["consumer_state_records"],
              m["consumer_groups"], m["consumer_queues"]] for name, m in meta["replicas"].items()])]
    lag = report.get("consumer_lag") or {}
    if lag.get("groups"):
        lines.append(f"Consumer lag on {lag['replica']} (queue max offset - committed offset):")
        for g in lag["groups"]:
            worst = sorted((q for q in lag["queues"] if q["group"] == g["group"] and q["lag"]),
                           key=lambda q: -q["lag"])[:max_queues]
            lines.append(f"  {g['group']}: total {g['lag']} over {g['queues']} queue(s)"
                         + (": " + ", ".join(f"{q['topic']}-{q['queue_id']} {q['lag']}" for q in worst)
                            if worst else ""))
    return lines


def summary_text(report: dict, examples_per_kind: int = 3) -> str:
    ref = report["reference"]
    lines = [f"Replica audit: {len(report['replicas'])} replicas, reference {ref}"]
    rows = []
    for s in report["replicas"]:
        rows.append([s["name"] + (" *" if s["reference"] else ""), s["min_offset"], s["valid_end"],
                     s["confirm_offset"], s["last_epoch"], "-" if s["consistent_point"] is None
                     else s["consistent_point"], s["lag_bytes"], s["records"], s["corrupt_records"],
                     s.get("cq_entries", 0)])
    lines += ["  " + x for x in _table(["REPLICA", "MIN", "VALID_END", "CONFIRM", "EPOCH", "CONSISTENT",
                                        "LAG_BYTES", "RECORDS", "CORRUPT", "CQ_UNITS"], rows)]
    for s in report["replicas"]:
        for note in s["notes"]:
            lines.append(f"  note {s['name']}: {note}")
        if s["valid_end_reason"] and not s["valid_end_reason"].startswith(("EMPTY", "end of the last")):
            lines.append(f"  {s['name']}: valid data ends at {s['valid_end']}: {s['valid_end_reason']}")
    lagging = [q for q in report["queues"] if q["lag"]]
    if lagging:
        worst = sorted(lagging, key=lambda q: -abs(q["lag"]))[:5]
        lines.append("  queue lag (reference max - replica max): " + ", ".join(
            f"{q['replica']} {q['topic']}-{q['queue_id']} {q['lag']}" for q in worst))
    lines += _metadata_lines(report)
    c = report["counts"]
    lines.append(f"Findings: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info")
    for kind in KINDS:
        for sev in SEVERITIES:
            n = c["by_kind"].get(kind, {}).get(sev)
            if not n:
                continue
            reps = sorted(r for r, kinds in c["by_replica"].items() if kinds.get(kind, {}).get(sev))
            lines.append(f"  {sev:<8} {kind:<24} {n:>6}  on {', '.join(reps)}")
            examples = [f for f in report["findings"] if (f["kind"], f["severity"]) == (kind, sev)]
            for f in examples[:examples_per_kind]:
                lines.append(f"           {f['replica']}: {_describe(f)}")
    sc, t = report["scan"], report["timings"]
    if sc.get("records") is not None:
        lines.append(f"Scanned {sc['records']:,} records ({sc.get('bytes', 0) / 1e6:,.1f} MB) in "
                     f"{t.get('scan_s', 0):.1f} s: {sc.get('records_per_s') or 0:,} records/s, "
                     f"{sc.get('records_per_s_per_core') or 0:,} per core ({sc.get('cores')} cores)")
    lines.append("Timings: " + ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in t.items() if k.endswith("_s")))
    lines.append("Verdict: " + ("FAIL: replicas disagree below the confirm offset, consume queues "
                                "are damaged, or the metadata does not match the data"
                                if report["exit_status"] else "OK"))
    return "\n".join(lines)


def chart(report: dict, path: str, max_queues: int = 40) -> None:
    """PNG: top, lag per queue (reference max offset - replica's), grouped per replica, and the
    lag in bytes per replica; bottom, the consumer lag per group on the reference (max offset -
    committed offset per queue, the group's total in the legend)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = report["reference"]
    others = [s["name"] for s in report["replicas"] if s["name"] != ref]
    lag = {(q["replica"], q["topic"], q["queue_id"]): q["lag"] for q in report["queues"]}
    queues = sorted({(q["topic"], q["queue_id"]) for q in report["queues"]})
    queues.sort(key=lambda k: -max([abs(lag.get((r, *k), 0)) for r in others] or [0]))
    queues = sorted(queues[:max_queues])
    consumers = report.get("consumer_lag") or {"groups": [], "queues": []}
    cq = sorted(consumers["queues"], key=lambda q: -abs(q["lag"]))[:max_queues]
    cq.sort(key=lambda q: (q["group"], q["topic"], q["queue_id"]))
    width_in = max(8.0, 4 + 0.35 * max(len(queues) * max(1, len(others)), len(cq)))
    fig = plt.figure(figsize=(width_in, 9))
    grid = fig.add_gridspec(2, 2, width_ratios=[3, 1])
    ax1, ax2, ax3 = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])
    width = 0.8 / max(1, len(others))
    for i, rep in enumerate(others):
        xs = [j + i * width for j in range(len(queues))]
        ax1.bar(xs, [lag.get((rep, t, q), 0) for t, q in queues], width, label=rep)
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(queues))])
    ax1.set_xticklabels([f"{t}-{q}" for t, q in queues], rotation=60, ha="right", fontsize=7)
    ax1.axhline(0, color="black", linewidth=0.8)
    ax1.set_ylabel("messages behind the reference")
    ax1.set_title(f"Consume queue lag per queue (reference {ref})")
    if others:
        ax1.legend(fontsize=8)
    if not any(lag.get((r, *k), 0) for r in others for k in queues):
        ax1.text(0.5, 0.5, "all queues in step", transform=ax1.transAxes, ha="center", va="center")
    names = [s["name"] for s in report["replicas"]]
    ax2.bar(names, [s["lag_bytes"] for s in report["replicas"]], color="tab:gray")
    ax2.set_title("Commitlog lag (bytes)")
    ax2.tick_params(axis="x", rotation=30)
    totals = {g["group"]: g["lag"] for g in consumers["groups"]}
    for group in sorted({q["group"] for q in cq}):
        idx = [j for j, q in enumerate(cq) if q["group"] == group]
        ax3.bar(idx, [cq[j]["lag"] for j in idx], 0.8, label=f"{group} (total {totals.get(group, 0)})")
    ax3.set_xticks(range(len(cq)))
    ax3.set_xticklabels([f"{q['topic']}-{q['queue_id']}" for q in cq], rotation=60, ha="right", fontsize=7)
    ax3.axhline(0, color="black", linewidth=0.8)
    ax3.set_ylabel("messages not consumed")
    ax3.set_title(f"Consumer lag per group and queue on {consumers.get('replica', ref)} "
                  f"(max offset - committed)")
    if cq:
        ax3.legend(fontsize=8)
    else:
        ax3.text(0.5, 0.5, "no consumer offsets", transform=ax3.transAxes, ha="center", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- several broker groups -----------------------------------------------------------------------
def build_groups(groups: dict[str, dict], cluster: list[dict], route: dict | None,
                 timings: dict) -> dict:
    """The report of an audit over several groups: `groups` maps each group to its own report
    (`build`, everything the audit of one group says), `cluster` the cluster-wide findings
    (cluster.audit.groups), `route` what the registry said (route.json's content, or None)."""
    c = cluster_counts(cluster)
    totals = {s: c[s] + sum(g["counts"][s] for g in groups.values()) for s in SEVERITIES}
    exit_status = 1 if totals[ERROR] else 0
    return {"tool": "cluster.audit", "version": 2,
            "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "exit_status": exit_status, "verdict": "errors found" if exit_status else "ok",
            "counts": {**totals, "by_group": {g: {s: r["counts"][s] for s in SEVERITIES}
                                              for g, r in groups.items()},
                       "cluster": c},
            "groups": groups,
            "cluster": {"findings": cluster, "route": _route_summary(route)},
            "timings": timings}


def _route_summary(route: dict | None) -> dict | None:
    if route is None:
        return None
    return {"controller": route.get("controller"), "version": route.get("version"),
            "version_before": route.get("version_before"),
            "groups": {g["broker_name"]: {"master_address": g.get("master_address"),
                                          "registered": g.get("registered"),
                                          "topics_version": g.get("topics_version"),
                                          "topics": len(g.get("topics", ()))}
                       for g in route.get("groups", ())}}


def _describe_cluster(f: dict) -> str:
    d = f["details"]
    what = f"{f['topic']}: " if f["topic"] else ""
    if f["kind"] == "route_topic_mismatch":
        what += d.get("problem", "")
        if d.get("why_warning"):
            what += f" ({d['why_warning']})"
    elif f["kind"] == "topic_queues_differ":
        what += ", ".join(f"{g} {q['read']}r/{q['write']}w" for g, q in d.get("queues", {}).items())
    else:
        what += d.get("reason", "")
    return what


def summary_text_groups(report: dict, examples_per_kind: int = 3) -> str:
    """Each group's summary (as for one group), then the cluster-wide findings and the verdict."""
    lines = []
    for group, rep in report["groups"].items():
        lines.append(f"== Group {group} ==")
        text = summary_text(rep, examples_per_kind).splitlines()
        lines += [x for x in text if not x.startswith("Verdict: ")]
        lines.append(f"Group {group}: " + ("FAIL" if rep["exit_status"] else "OK"))
    cl = report["cluster"]
    route = cl.get("route")
    lines.append(f"== Cluster-wide ({len(report['groups'])} groups) ==")
    if route:
        lines.append(f"Route registry of {route.get('controller') or 'the controller'} "
                     f"(version {route.get('version')}):")
        lines += ["  " + x for x in _table(
            ["GROUP", "MASTER", "REGISTERED", "TOPICS", "TOPICS_VERSION"],
            [[g, r["master_address"] or "-", r["registered"], r["topics"], r["topics_version"] or "-"]
             for g, r in route["groups"].items()])]
    c = report["counts"]["cluster"]
    lines.append(f"Cluster findings: {c['error']} error(s), {c['warning']} warning(s), {c['info']} info")
    shown: dict[tuple, int] = {}
    for f in cl["findings"]:
        key = (f["kind"], f["severity"])
        shown[key] = shown.get(key, 0) + 1
        if shown[key] <= examples_per_kind:
            lines.append(f"  {f['severity']:<8} {f['kind']:<24} [{f['group'] or '-'}] {_describe_cluster(f)}")
    for (kind, sev), n in shown.items():
        if n > examples_per_kind:
            lines.append(f"  {sev:<8} {kind:<24} ... {n - examples_per_kind} more in report.json")
    t = report["counts"]
    lines.append("Per group: " + ", ".join(f"{g} {x['error']} error(s) {x['warning']} warning(s)"
                                           for g, x in t["by_group"].items()))
    tm = report["timings"]
    lines.append("Timings: " + ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in tm.items() if k.endswith("_s")))
    failing = [g for g, r in report["groups"].items() if r["exit_status"]]
    if c["error"]:
        failing.append("cluster-wide")
    lines.append("Verdict: " + (f"FAIL ({', '.join(failing)})" if report["exit_status"] else "OK"))
    return "\n".join(lines)
