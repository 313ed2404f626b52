"""A process's HTTP endpoint: `/metrics` in Prometheus' text format (prometheus-client renders
the registry of this process's collectors), and optionally static pages (the web console,
cluster/console/) and a JSON API (the console's, the archive's), which needs the admin token
(`Authorization: Bearer <token>`): GET handlers take the query parameters, POST handlers the
request's JSON body. A refusal is {"error": ...} with an HTTP status: ApiError's own, or an
AdminError's code mapped (INVALID_ARGUMENT 400, NOT_FOUND 404, FAILED_PRECONDITION 409,
UNAVAILABLE 503). A daemon thread per request (ThreadingHTTPServer).

HTTPS when the process runs with TLS (`tls`: its TlsSettings, tlsEnable=true): the same
certificate and key as its gRPC port, TLS 1.2 or later (cluster/security/tls.py
http_ssl_context). The handshake runs on the request's thread, bounded by HANDSHAKE_TIMEOUT_S,
so a client that stalls it delays nobody else; a plain-HTTP request to such a port fails its
handshake and is closed unanswered. The API's token is asked for as over plain HTTP.
"""
from __future__ import annotations

import hmac
import json
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import parse_qs, urlparse

import grpc
from google.protobuf import json_format
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from cluster.admin.admin_error import AdminError
from cluster.security.tls import TlsSettings, http_ssl_context

log = logging.getLogger(__name__)

Api = Callable[[dict[str, str]], Any]  # query parameters -> a JSON-able answer
PostApi = Callable[[Any], Any]  # the request's JSON body -> a JSON-able answer
Page = tuple[str, bytes]  # (content type, body)
MAX_BODY = 1 << 20
HANDSHAKE_TIMEOUT_S = 10.0
_HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
                grpc.StatusCode.FAILED_PRECONDITION: 409, grpc.StatusCode.UNAVAILABLE: 503,
                grpc.StatusCode.UNAUTHENTICATED: 401}


def proto_json(message) -> dict[str, Any]:
    """A protobuf answer as JSON: field names as in the .proto, every field present."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


class ApiError(Exception):
    """A refused API request: `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _TlsHTTPServer(ThreadingHTTPServer):
    """HTTPS: accepts plain sockets on the serving thread and wraps each one in TLS on its
    request's thread (a slow or silent client stalls only its own handshake)."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 context: ssl.SSLContext) -> None:
        super().__init__(address, handler)
        self.context = context

    def finish_request(self, request: socket.socket, client_address: Any) -> None:
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as e:  # plain HTTP, an untrusting client, a timeout
            log.debug("https %s: handshake failed: %s", client_address[0], e)
            return
        try:
            tls.settimeout(None)
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            self.shutdown_request(tls)


class MetricsEndpoint:
    """Owns the registry and the HTTP server at `address` (host:port; port 0: a free one,
    `port` says which). `pages`: static files by path; `api`: JSON handlers by path (token);
    `tls`: the process's TlsSettings (enabled: HTTPS, the module docstring)."""

    def __init__(self, address: str, collectors: Iterable[Collector], *,
                 pages: Mapping[str, Page] | None = None, api: Mapping[str, Api] | None = None,
                 post: Mapping[str, PostApi] | None = None, token: str = "",
                 tls: TlsSettings | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for c in collectors:
            self.registry.register(c)
        handler = _handler(self.registry, dict(pages or {}), dict(api or {}), dict(post or {}),
                           token)
        host, _, port = address.rpartition(":")
        context = http_ssl_context(tls)
        self._server = ThreadingHTTPServer((host, int(port)), handler) if context is None \
            else _TlsHTTPServer((host, int(port)), handler, context)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.address = f"{host}:{self.port}"
        self.scheme = "http" if context is None else "https"
        threading.Thread(target=self._server.serve_forever, name="http", daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: CollectorRegistry, pages: dict[str, Page], api: dict[str, Api],
             post: dict[str, PostApi], token: str) -> type[BaseHTTPRequestHandler]:
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        """One HTTP request (a thread of the ThreadingHTTPServer each): serves /metrics from
        the registry, the static pages, and the token-checked GET and POST JSON APIs. State
        is the request's own; the registry, pages and APIs are shared read-only."""

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("http %s: " + fmt, self.client_address[0], *args)

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, payload: Any) -> None:
            self._send(status, "application/json", json.dumps(payload).encode())

        def _authorized(self) -> bool:
            presented = (self.headers.get("Authorization") or "").encode()
            if token and hmac.compare_digest(presented, expected):
                return True
            self._json(401, {"error": "missing or wrong 'Authorization: Bearer <admin token>'"})
            return False

        def _answer(self, path: str, call: Callable[[], Any]) -> None:
            try:
                self._json(200, call())
            except ApiError as e:
                self._json(e.status, {"error": str(e)})
            except AdminError as e:
                self._json(_HTTP_STATUS.get(e.code, 400), {"error": e.message})
            except Exception as e:  # noqa: BLE001 - the caller sees why, the log has the trace
                log.warning("HTTP API %s failed", path, exc_info=True)
                self._json(502, {"error": f"{type(e).__name__}: {e}"})

        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            if url.path == "/metrics":
                return self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
            if url.path in pages:
                return self._send(200, *pages[url.path])
            fn = api.get(url.path)
            if fn is None:
                return self._json(404, {"error": f"no such path {url.path}"})
            if self._authorized():
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                self._answer(url.path, lambda: fn(params))

        def do_POST(self) -> None:  # noqa: N802
            path = urlparse(self.path).path
            fn = post.get(path)
            if fn is None:
                return self._json(404, {"error": f"no such path {path}"})
            if not self._authorized():
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                return self._json(400, {"error": f"want a JSON body of 1..{MAX_BODY} bytes"})
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError as e:
                return self._json(400, {"error": f"the body is not JSON: {e}"})
            self._answer(path, lambda: fn(body))

    return Handler
