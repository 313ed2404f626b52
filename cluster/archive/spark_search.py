"""The search over every archived commitlog file, for archives too large for one machine's
index lookups: the audit's Spark machinery (cluster/audit/job.make_spark), one task per file,
each mapping its file read-only and keeping the records a SearchFilter matches
(search_filter.scan_file, the same function the local form runs).

Files: `<archive root>/<group>/commitlog/<20-digit offset>` of every group (or one); partial
uploads (`.part`) and gaps are simply not there to scan. Results are sorted by store time, then
group and commitlog offset.
"""
from __future__ import annotations

import os

from store.layout import is_offset_file_name
from store.readonly.files import numbered_files

from cluster.archive.archive_group import group_names
from cluster.archive.search_filter import COLUMNS, SearchFilter, scan_file

SCHEMA = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
ArchivedFile = tuple[str, str, int]  # (group, path, first offset)


def archived_files(root: str, group: str = "") -> list[ArchivedFile]:
    groups = [group] if group else group_names(root)
    out = []
    for g in groups:
        directory = os.path.join(root, g, "commitlog")
        out += [(g, path, base) for path, base in numbered_files(directory, is_offset_file_name)]
    return out


def _order(r: dict) -> tuple:
    return r["store_timestamp"], r["group"], r["commit_log_offset"]


def search_local(root: str, flt: SearchFilter, group: str = "") -> list[dict]:
    """The same search in this process, file after file."""
    rows = [r for g, path, base in archived_files(root, group)
            for r in scan_file(g, path, base, flt)]
    return sorted(rows, key=_order)


def search_spark(spark, root: str, flt: SearchFilter, group: str = ""):
    """A DataFrame of the matches (COLUMNS), one Spark task per archived file."""
    files = archived_files(root, group)
    names = [name for name, _ in COLUMNS]
    if not files:
        return spark.createDataFrame([], SCHEMA)
    rdd = spark.sparkContext.parallelize(files, len(files)).flatMap(
        lambda f: [tuple(r[n] for n in names) for r in scan_file(f[0], f[1], f[2], flt)])
    return spark.createDataFrame(rdd, SCHEMA).orderBy("store_timestamp", "group",
                                                      "commit_log_offset")
