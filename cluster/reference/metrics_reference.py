"""The metrics reference: every metric family the collectors of cluster/metrics/ export, read
from their source (ast): the name, type, labels and help text each `collect()` passes to
prometheus-client's metric families, following the collectors' own helpers (`gauge`,
`counter`, `family`, nested ones) and loops over literal tuples. The help text on the page is
the one Prometheus shows. A family the reader cannot follow (a name not known until the
scrape) fails the build; tests/docs/test_metrics_reference.py compares the result with real
collections."""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Iterator

from cluster.metrics import node_collector, process_collectors
from cluster.reference.markdown import cell, code, table

KINDS = {"GaugeMetricFamily": "gauge", "CounterMetricFamily": "counter",
         "HistogramMetricFamily": "histogram"}


@dataclass(frozen=True)
class Family:
    name: str  # as exported: a counter's with _total, a histogram's without its suffixes
    kind: str
    labels: tuple[str, ...]
    help: str


class Unknown:
    """A value only known at scrape time."""


UNKNOWN = Unknown()


@dataclass(frozen=True)
class Kind:
    """A metric family class, as a value (passed to a helper as `kind`)."""
    kind: str


@dataclass(frozen=True)
class Function:
    node: ast.FunctionDef
    env: dict  # where it was defined (closures)
    owner: ast.ClassDef | None


class Reader:
    """Follows one module's collect() methods statement by statement."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.tree = ast.parse(inspect.getsource(module))
        self.globals: dict[str, object] = {}
        for name, kind in KINDS.items():
            self.globals[name] = Kind(kind)
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name):
                self.globals[node.targets[0].id] = self.value(node.value, {})
            elif isinstance(node, ast.FunctionDef):
                self.globals[node.name] = Function(node, self.globals, None)
        self.found: list[Family] = []

    def collectors(self) -> Iterator[ast.ClassDef]:
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name == "collect" for f in node.body):
                yield node

    def read(self, cls: ast.ClassDef) -> list[Family]:
        self.found = []
        collect = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "collect")
        self.call(Function(collect, self.globals, cls), [], {}, depth=0)
        return list(dict.fromkeys(self.found))

    # ---- values ----

    def value(self, node: ast.expr, env: dict) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.globals:
                return self.globals[node.id]
            return UNKNOWN
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left, env), self.value(node.right, env)
            if isinstance(left, (str, list, tuple)) and type(left) is type(right):
                return left + right
            return UNKNOWN
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e, env) for e in node.elts]
        if isinstance(node, ast.Dict):
            return {self.value(k, env): UNKNOWN for k in node.keys if k is not None}
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            for v in node.values:
                got = self.value(v, env)
                if got is UNKNOWN or got:
                    return got
            return got
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                got = self.value(v.value, env) if isinstance(v, ast.FormattedValue) else v.value
                if not isinstance(got, str):
                    return UNKNOWN
                parts.append(got)
            return "".join(parts)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "list" and len(node.args) == 1:
                got = self.value(node.args[0], env)
                return list(got) if isinstance(got, (list, tuple, dict)) else UNKNOWN
            if isinstance(node.func, ast.Attribute) and node.func.attr == "replace":
                target = self.value(node.func.value, env)
                args = [self.value(a, env) for a in node.args]
                if isinstance(target, str) and all(isinstance(a, str) for a in args):
                    return target.replace(*args)
        return UNKNOWN

    # ---- statements ----

    def call(self, fn: Function, args: list, kwargs: dict, depth: int) -> None:
        if depth > 12:
            raise ValueError(f"{self.module.__name__}: helpers nested too deep")
        env = dict(fn.env)
        params = fn.node.args
        positional = [a.arg for a in params.posonlyargs + params.args]
        defaults = params.defaults
        for name, default in zip(positional[len(positional) - len(defaults):], defaults):
            env[name] = self.value(default, self.globals)
        for name, value in zip(positional, args):
            env[name] = value
        env.update(kwargs)
        self.body(fn.node.body, env, fn.owner, depth)

    def body(self, statements: list[ast.stmt], env: dict, owner, depth: int) -> None:
        for st in statements:
            if isinstance(st, ast.FunctionDef):
                env[st.name] = Function(st, env, owner)
            elif isinstance(st, ast.Assign):
                self.expression(st.value, env, owner, depth)
                value = self.value(st.value, env)
                for target in st.targets:
                    if isinstance(target, ast.Name):
                        env[target.id] = value
                    else:
                        for name in ast.walk(target):
                            if isinstance(name, ast.Name):
                                env[name.id] = UNKNOWN
            elif isinstance(st, ast.For):
                items = self.value(st.iter, env)
                names = [n.id for n in ast.walk(st.target) if isinstance(n, ast.Name)]
                if isinstance(items, list) and items and isinstance(st.target, (ast.Tuple, ast.Name)):
                    for item in items:
                        inner = dict(env)
                        if isinstance(st.target, ast.Name):
                            inner[st.target.id] = item
                        else:
                            for t, v in zip(st.target.elts, item if isinstance(item, list) else []):
                                if isinstance(t, ast.Name):
                                    inner[t.id] = v
                        self.body(st.body, inner, owner, depth)
                else:
                    inner = dict(env, **{n: UNKNOWN for n in names})
                    self.body(st.body, inner, owner, depth)
            elif isinstance(st, (ast.If, ast.While)):
                self.body(st.body, env, owner, depth)
                self.body(st.orelse, env, owner, depth)
            elif isinstance(st, ast.Try):
                for block in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                    self.body(block, env, owner, depth)
            elif isinstance(st, ast.With):
                self.body(st.body, env, owner, depth)
            elif isinstance(st, (ast.Expr, ast.Return)) and st.value is not None:
                self.expression(st.value, env, owner, depth)

    def expression(self, node: ast.expr, env: dict, owner, depth: int) -> None:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            target = self.callee(call.func, env, owner)
            if target is None:
                continue
            args = [self.value(a, env) for a in call.args]
            kwargs = {k.arg: self.value(k.value, env) for k in call.keywords if k.arg}
            if isinstance(target, Kind):
                self.family(target, call, args, kwargs)
            else:
                self.call(target, args, kwargs, depth + 1)

    def callee(self, func: ast.expr, env: dict, owner) -> Kind | Function | None:
        if isinstance(func, ast.Name):
            got = env.get(func.id, self.globals.get(func.id))
            return got if isinstance(got, (Kind, Function)) else None
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "self" and owner is not None):
            for f in owner.body:
                if isinstance(f, ast.FunctionDef) and f.name == func.attr:
                    return Function(f, self.globals, owner)
        return None

    def family(self, kind: Kind, call: ast.Call, args: list, kwargs: dict) -> None:
        name = args[0] if args else kwargs.get("name", UNKNOWN)
        doc = args[1] if len(args) > 1 else kwargs.get("documentation", UNKNOWN)
        labels = kwargs.get("labels", args[2] if len(args) > 2 else [])
        where = f"{self.module.__name__} line {call.lineno}"
        if not isinstance(name, str) or not isinstance(doc, str):
            raise ValueError(f"{where}: a metric whose name or help is only known at scrape "
                             f"time; the reference cannot list it")
        if labels is None:
            labels = []
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ValueError(f"{where}: {name}'s labels are only known at scrape time")
        exported = name + "_total" if kind.kind == "counter" and not name.endswith("_total") else name
        self.found.append(Family(exported, kind.kind, tuple(labels), doc))


def families() -> dict[str, list[Family]]:
    """Per collector class (NodeCollector, ControllerCollector, ArchiveCollector), its
    families in the order collect() makes them."""
    out = {}
    for module in (node_collector, process_collectors):
        reader = Reader(module)
        for cls in reader.collectors():
            out[cls.name] = reader.read(cls)
    return out


TITLES = {"NodeCollector": "Nodes", "ControllerCollector": "Controllers",
          "ArchiveCollector": "Archive servers"}
SUFFIXES = {"histogram": " (`_bucket`, `_sum`, `_count`)"}


def render() -> str:
    parts = []
    for collector, found in families().items():
        parts += [f"### {TITLES.get(collector, collector)}", "",
                  f"`{collector}` ({'cluster/metrics/'}).", ""]
        rows = [[code(f.name) + SUFFIXES.get(f.kind, ""), f.kind,
                 ", ".join(code(x) for x in f.labels), cell(f.help)] for f in found]
        parts += [table(["metric", "type", "labels", "what"], rows), ""]
    return "\n".join(parts)
