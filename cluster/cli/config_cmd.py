"""`python -m cluster config get|set` (mqadmin getBrokerConfig / updateBrokerConfig). `set`
takes only the keys the node lists as runtime-updatable, and lasts until the node restarts."""
from __future__ import annotations

from cluster.client.admin_client import AdminClient
from cluster.cli.commands import answer, command, group
from cluster.cli.output import table


def register(sub) -> None:
    c = group(sub, "config", "show the effective config, change an allow-listed key at runtime")
    g = command(c, "get", "effective config (RocketMQ key names)", answer(_get, _show_get),
                prefix="config")
    g.add_argument("keys", nargs="*", help="only these keys")
    g.add_argument("--updatable", action="store_true", help="only keys `config set` accepts")
    s = command(c, "set", "change one runtime-updatable key (in memory until restart)",
                answer(lambda client, args: client.update_config(args.key, args.value), _show_set),
                prefix="config")
    s.add_argument("key")
    s.add_argument("value")


def _get(client: AdminClient, args) -> dict:
    r = client.get_config(args.keys)
    return {"entries": [{"key": e.key, "value": e.value, "runtime_updatable": e.runtime_updatable}
                        for e in r.entries if e.runtime_updatable or not args.updatable]}


def _show_get(r: dict, args) -> None:
    table(("key", "value", "updatable"),
          [(e["key"], e["value"], "yes" if e["runtime_updatable"] else "") for e in r["entries"]])


def _show_set(r, args) -> None:
    print(f"{r.key}: {r.old_value} -> {r.value}")
    print(r.note)
