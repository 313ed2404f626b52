"""A small etcd v3 client over etcd's JSON gateway (HTTP + JSON, the standard library only): the
key-value range/put/txn calls and leases (grant, keepalive, revoke) the controller needs.

Why the gateway and not a gRPC client library (checked against grpcio 1.85 / protobuf 7.36):
- python-etcd3 (`etcd3` 0.12.0, the last release, 2020) ships protoc-3 generated code: importing
  it fails under protobuf >= 4 ("Descriptors cannot be created directly").
- etcd3-py (0.1.6, 2019) speaks the same JSON gateway, through requests/aiohttp, unmaintained.
- aetcd 1.0.0 does import beside our versions (it allows protobuf >4,<8 and grpcio >1.66), but it
  is asyncio-only (the controller is threads) and its generated code caps protobuf below 8, so
  every protobuf major of ours would wait for its release.
The gateway is part of etcd itself (Debian's etcd-server 3.4.23 serves it at /v3/), and a few
JSON calls need nothing beyond urllib: no new dependency, nothing tied to our protobuf.

Wire format: keys and values are base64 in JSON; int64 fields come back as strings and fields
at their zero value are left out (an expired lease's keepalive answers without a TTL).
Endpoints are tried in turn (the last one that answered first); a request fails over to the
next on a connection error, a timeout or a 5xx, and raises EtcdError on a 4xx (the request
itself is wrong, another member would say the same).
"""
from __future__ import annotations

import base64
import json
import logging
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from store.errors import StoreError

log = logging.getLogger(__name__)


class EtcdError(StoreError):
    """A call to etcd failed: `endpoint` and `path` say where, `detail` what etcd (or the
    network) said. `code` is etcd's gRPC status code when etcd answered, else None."""

    def __init__(self, endpoint: str, path: str, detail: str, code: int | None = None) -> None:
        self.endpoint = endpoint
        self.path = path
        self.detail = detail
        self.code = code
        super().__init__(f"etcd {endpoint}{path}: {detail}")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that covers every key starting with `prefix` (etcd's `--prefix`)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict[str, Any]) -> "KeyValue":
        return cls(unb64(kv["key"]), unb64(kv.get("value", "")),
                   int(kv.get("create_revision", 0)), int(kv.get("mod_revision", 0)),
                   int(kv.get("version", 0)), int(kv.get("lease", 0)))


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int  # the store's revision after the txn (a put's new mod_revision)
    ranges: list[list[KeyValue]]  # what each request_range of the branch taken found


# -- txn building blocks (JSON of etcdserverpb.Compare / RequestOp) ------------------------------
def compare_mod(key: bytes, revision: int) -> dict[str, Any]:
    """The key was last modified at `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def compare_create(key: bytes, revision: int) -> dict[str, Any]:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL",
            "create_revision": str(revision)}


def compare_lease(key: bytes, lease: int) -> dict[str, Any]:
    """The key is attached to `lease` (lease ids are unique in the cluster)."""
    return {"key": b64(key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)}


def put_op(key: bytes, value: bytes, lease: int = 0) -> dict[str, Any]:
    put: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        put["lease"] = str(lease)
    return {"request_put": put}


def range_op(key: bytes) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}


class EtcdClient:
    """Owns the list of endpoints and which one answered last (`_lock` guards that index; the
    calls themselves run unlocked, each with its own HTTP connection)."""

    def __init__(self, endpoints: list[str] | tuple[str, ...], timeout_s: float = 1.0) -> None:
        if not endpoints:
            raise ValueError("an etcd client needs at least one endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._preferred = 0

    # -- key-value --------------------------------------------------------------------------
    def get(self, key: bytes) -> KeyValue | None:
        kvs, _ = self.range(key)
        return kvs[0] if kvs else None

    def range(self, key: bytes, prefix: bool = False) -> tuple[list[KeyValue], int]:
        """The key (or every key under the prefix), and the store's revision."""
        body: dict[str, Any] = {"key": b64(key)}
        if prefix:
            body["range_end"] = b64(prefix_end(key))
        answer = self._call("/v3/kv/range", body)
        return ([KeyValue.from_json(kv) for kv in answer.get("kvs", [])],
                int(answer.get("header", {}).get("revision", 0)))

    def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """Unconditional put; the new revision."""
        answer = self._call("/v3/kv/put", put_op(key, value, lease)["request_put"])
        return int(answer.get("header", {}).get("revision", 0))

    def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
            failure: list[dict[str, Any]] | None = None) -> TxnResult:
        answer = self._call("/v3/kv/txn", {"compare": compare, "success": success,
                                           "failure": failure or []})
        ranges = [[KeyValue.from_json(kv) for kv in r["response_range"].get("kvs", [])]
                  for r in answer.get("responses", []) if "response_range" in r]
        return TxnResult(bool(answer.get("succeeded", False)),
                         int(answer.get("header", {}).get("revision", 0)), ranges)

    # -- leases -----------------------------------------------------------------------------
    def grant(self, ttl_s: int) -> int:
        """A new lease of `ttl_s` seconds; its id."""
        answer = self._call("/v3/lease/grant", {"TTL": ttl_s})
        if answer.get("error"):  # LeaseGrantResponse carries its own error string
            raise EtcdError(",".join(self.endpoints), "/v3/lease/grant", str(answer["error"]))
        return int(answer["ID"])

    def keepalive(self, lease: int) -> int:
        """Renew the lease; the TTL it now has in seconds, 0 when it is gone (expired or
        revoked: etcd answers without a TTL)."""
        answer = self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    def revoke(self, lease: int) -> None:
        """Revoke the lease (its keys go with it); a lease already gone is not an error."""
        try:
            self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as e:
            if e.code != 5:  # NOT_FOUND: expired already
                raise

    # -- transport --------------------------------------------------------------------------
    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            start = self._preferred
        failures: list[str] = []
        for i in range(len(self.endpoints)):
            index = (start + i) % len(self.endpoints)
            endpoint = self.endpoints[index]
            try:
                answer = self._post(endpoint, path, body)
            except _Retryable as e:
                failures.append(f"{endpoint}: {e}")
                continue
            with self._lock:
                self._preferred = index
            return answer
        raise EtcdError(",".join(self.endpoints), path, "; ".join(failures))

    def _post(self, endpoint: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(endpoint + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read()
        except urllib.error.HTTPError as e:
            detail, code = _error_of(e)
            if e.code >= 500:
                raise _Retryable(f"HTTP {e.code}: {detail}") from None
            raise EtcdError(endpoint, path, f"HTTP {e.code}: {detail}", code) from None
        except (urllib.error.URLError, OSError) as e:  # refused, unreachable, timed out
            reason = getattr(e, "reason", e)
            raise _Retryable(f"{type(reason).__name__}: {reason}") from None
        try:
            answer = json.loads(text)
        except ValueError:
            raise EtcdError(endpoint, path, f"not JSON: {text[:200]!r}") from None
        # A streaming call (keepalive) wraps an error in the body with HTTP 200.
        if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
            err = answer["error"]
            raise EtcdError(endpoint, path, str(err.get("message", err)),
                            err.get("grpc_code", err.get("code")))
        return answer


class _Retryable(Exception):
    """This endpoint did not answer properly: try the next one."""


def _error_of(e: urllib.error.HTTPError) -> tuple[str, int | None]:
    try:
        data = json.loads(e.read())
        return str(data.get("message") or data.get("error") or data), data.get("code")
    except (ValueError, OSError):
        return e.reason or "", None
