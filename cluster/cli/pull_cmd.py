"""`python -m cluster pull`: copy a running node's store over Admin.ExportStore; progress
(percent, MB/s) on stderr, a one-line summary on stdout."""
from __future__ import annotations

import sys
import time

from cluster.client.admin_client import AdminClient, ExportError
from cluster.cli.commands import command


def register(sub) -> None:
    pull = command(sub, "pull", "copy a running node's store directory (Admin.ExportStore)",
                   run_pull, node=None, json_flag=False)
    pull.add_argument("--out", required=True, help="destination: must not exist or be empty")
    pull.add_argument("--include", default="",
                      help="comma-separated parts: commitlog,consumequeue,index,config,"
                           "checkpoint,epochFileCheckpoint (default: all)")
    pull.add_argument("--chunk-bytes", type=int, default=1 << 20)


def run_pull(client: AdminClient, args) -> int:
    include = [p for p in args.include.split(",") if p.strip()]
    last = [0.0]

    def progress(p) -> None:
        now = time.monotonic()
        if now - last[0] < 0.5 and p.bytes_done < p.bytes_total:
            return
        last[0] = now
        pct = 100.0 * p.bytes_done / p.bytes_total if p.bytes_total else 100.0
        rate = p.bytes_done / 1e6 / p.seconds if p.seconds > 0 else 0.0
        sys.stderr.write(f"\rpull: {pct:5.1f}%  {p.bytes_done / 1048576:.1f}/"
                         f"{p.bytes_total / 1048576:.1f} MiB  {rate:.1f} MB/s  "
                         f"files {p.files_done}/{p.files_total}   ")
        sys.stderr.flush()

    try:
        s = client.export_store(args.out, include=include, chunk_bytes=args.chunk_bytes,
                                progress=progress)
    except ExportError as e:
        sys.stderr.write(f"\npull failed: {e}\n")
        return 1
    except BaseException:
        sys.stderr.write("\n")
        raise  # an RpcError is reported by the command runner
    sys.stderr.write("\n")
    rate = s.bytes / 1e6 / s.seconds if s.seconds > 0 else 0.0
    print(f"pulled {s.files} files, {s.bytes} bytes in {s.seconds:.1f} s ({rate:.1f} MB/s) from "
          f"{s.node_id or client.address} into {args.out}; commitlog [{s.commitlog_min_offset}, "
          f"{s.commitlog_end_offset})")
    return 0
