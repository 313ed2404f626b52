"""Rendering of drill results: one summary row per drill, the table of rows (plain text for the
terminal, GitHub markdown for the docs), a few detail lines naming what went wrong, and each
fault's write rate and p99 before, during and after it."""
from __future__ import annotations

from statistics import median

from common.text_output import format_table

from cluster.drills.checker import (AFTER_ACK, NOT_ACKED, STORED_TWICE, UNATTRIBUTED,
                                    DrillResult, first_of)
from cluster.drills.phases import FaultPhases

COLUMNS = ("drill", "acked", "failed", "unknown", "lost", "phantom", "duplicates", "order",
           "recovery", "verdict")
# The table cell is narrow: each duplicate cause gets one word.
_SHORT_WHY = {STORED_TWICE: "stored twice", AFTER_ACK: "after ack", NOT_ACKED: "redelivered"}


def summary_row(name: str, r: DrillResult, recovers: bool = True) -> dict[str, str]:
    """The table row of one drill, columns in COLUMNS order."""
    row = dict.fromkeys(COLUMNS, "")
    row.update(drill=name, acked=str(r.sends_ok), failed=str(r.sends_failed),
               unknown=str(r.sends_unknown), lost=str(len(r.lost)), phantom=str(len(r.phantom)),
               duplicates=_duplicates_cell(r),
               order=str(len(r.order_violations)) if r.fifo_checked else "-",
               recovery=_recovery_cell(r, recovers), verdict="PASS" if r.passed else "FAIL")
    return row


def _duplicates_cell(r: DrillResult) -> str:
    total = sum(r.duplicates.values())
    if not total:
        return "0"
    whys = ", ".join(f"{_SHORT_WHY.get(why, why)} {n}" for why, n in r.duplicates.items())
    return f"{total} ({whys})"


def _recovery_cell(r: DrillResult, recovers: bool) -> str:
    if not recovers:
        return "unavailable"
    if not r.recovery_s:
        return "-"    # no fault was injected
    values = [v for v in r.recovery_s if v is not None]
    missing = len(r.recovery_s) - len(values)
    if not values:
        return "none"
    if len(r.recovery_s) == 1:
        return f"{values[0]:.2f} s"
    cell = f"{min(values):.1f}/{median(values):.1f}/{max(values):.1f} s"
    return cell + (f" ({missing} none)" if missing else "")


def render_table(rows: list[dict[str, str]], markdown: bool = False) -> str:
    """An aligned plain-text table (the first column left-aligned, counts right-aligned), or a
    GitHub markdown table."""
    if not rows:
        return ""
    columns = list(dict.fromkeys(c for row in rows for c in row))
    cells = [columns] + [[row.get(c, "") for c in columns] for row in rows]
    if markdown:
        lines = ["| " + " | ".join(line) + " |" for line in cells]
        rule = "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(columns))) + "|"
        return "\n".join([lines[0], rule, *lines[1:]])
    return "\n".join(format_table(columns, cells[1:], right=range(1, len(columns)), rule=True))


def render_detail(name: str, r: DrillResult) -> str:
    """A few lines for the CLI after the table: the verdict, each failure, and the first keys of
    each kind of problem."""
    lines = [f"{name}: {'PASS' if r.passed else 'FAIL'}"]
    lines += [f"  failure: {f}" for f in r.failures]
    if r.lost:
        lines.append(f"  lost: {first_of([f'{g}/{k}' for g, k in r.lost])}")
    if r.phantom:
        lines.append(f"  phantom: {first_of([f'{g}/{k} ({why})' for g, k, why in r.phantom])}")
    if r.order_violations:
        lines.append(f"  order: {first_of(list(r.order_violations), sep='; ')}")
    if r.duplicates:
        lines.append("  duplicates: " + ", ".join(f"{why}: {n}" for why, n in r.duplicates.items()))
    if r.sends_unknown:
        lines.append(f"  unknown sends: {r.unknown_delivered} delivered, "
                     f"{r.unknown_never_delivered} never delivered")
    if r.recovery_s:
        recovery = ", ".join("none" if v is None else f"{v:.2f} s" for v in r.recovery_s)
        lines.append(f"  recovery per fault: {recovery}; longest outage {r.longest_outage_s:.2f} s")
    return "\n".join(lines)


def render_client_view(name: str, r: DrillResult) -> str:
    """What the producers' applications saw, printed for every drill: each client kind's gap
    per fault and the duplicates stored."""
    lines = []
    for client, gaps in r.client_gaps.items():
        who = client if " " in client else f"{client} client"
        lines.append(f"  {name}: client-view gap per fault ({who}): {gaps_text(gaps)}")
        resumed = ", ".join("-" if v is None else f"{v:+.2f}"
                            for v in r.client_resumed.get(client, ()))
        lines.append(f"  {name}:   its end, from the new master seen ({who}): {resumed} s")
    lines.append(f"  {name}: duplicates stored: {r.stored_duplicates}")
    if r.per_group:
        lines.append(f"  {name}: stored in two groups (a client's resend to another group "
                     f"after a lost answer): {r.copies_in_other_groups}")
    return "\n".join(lines)


def gaps_text(gaps: tuple[float | None, ...]) -> str:
    """"3.1, 2.9, none s; median 3.0, max 3.1 s" (median and max over the faults answered)."""
    each = ", ".join("none" if g is None else f"{g:.1f}" for g in gaps)
    values = [g for g in gaps if g is not None]
    if not values:
        return f"{each} s"
    return f"{each} s; median {median(values):.1f}, max {max(values):.1f} s"



PHASE_COLUMNS = ("window", "seconds", "acked/s", "p99 ms", "not acked")


def phase_rows(fp: FaultPhases) -> list[dict[str, str]]:
    """One row per window of a fault (phases.py), times relative to its start."""
    return [{"window": f"{p.name} [{p.start_s:+.0f}, {p.end_s:+.0f}) s",
             "seconds": f"{p.seconds:.1f}", "acked/s": f"{p.rate:.0f}",
             "p99 ms": "-" if p.p99_ms is None else f"{p.p99_ms:.1f}",
             "not acked": str(p.not_ok)} for p in fp.phases]


def render_phases(name: str, r: DrillResult, markdown: bool = False) -> str:
    """Each fault's table of windows, with the during/before ratios of rate and p99."""
    blocks = []
    for fp in r.phases:
        if not fp.phases:
            continue
        ratios = []
        if fp.rate_ratio is not None:
            ratios.append(f"rate during/before {fp.rate_ratio:.2f}x")
        if fp.p99_ratio is not None:
            ratios.append(f"p99 during/before {fp.p99_ratio:.2f}x")
        head = f"{name}: {fp.fault}" + (f" ({', '.join(ratios)})" if ratios else "")
        blocks.append(head + "\n" + render_table(phase_rows(fp), markdown))
    return "\n".join(blocks)


GROUP_COLUMNS = ("group", "acked", "failed", "unknown", "moved away", "moved in")


def group_rows(r: DrillResult) -> list[dict[str, str]]:
    """One row per broker group of a drill run with several (none with one group): the
    faulted group marked, sends whose group is not known last."""
    rows = []
    for group, n in r.per_group.items():
        name = "not known" if group == UNATTRIBUTED else group
        if group == r.fault_group:
            name += " (fault)"
        rows.append(dict(zip(GROUP_COLUMNS, (name, str(n.acked), str(n.failed), str(n.unknown),
                                             str(n.moved_away), str(n.moved_in)))))
    return rows


def render_groups(name: str, r: DrillResult, markdown: bool = False) -> str:
    """The sends per broker group ("" for a run on one group): which group stored them, which
    failed them, and which refused sends the client moved to another group."""
    rows = group_rows(r)
    if not rows:
        return ""
    return f"  {name}: sends per broker group\n" + render_table(rows, markdown=markdown)
