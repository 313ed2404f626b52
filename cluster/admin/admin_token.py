"""The Admin API's bearer token: where it comes from, and the server interceptor that checks it.

Token sources, in order: `adminToken` in the config, the file named by `adminTokenFile`, or a
token the node generates on first start into <store>/config/admin.token, created with mode 0600
(never readable by other users, not even for a moment) and reused on later starts.
"""
from __future__ import annotations

import hmac
import logging
import os
import secrets
from typing import Callable

import grpc

from common.config_values import ConfigError

log = logging.getLogger(__name__)
PROTECTED_PREFIX = "/rmqstore.admin."


def read_token_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as e:
        raise ConfigError(f"cannot read the admin token file {path}: {e}") from e
    if not token:
        raise ConfigError(f"the admin token file {path} is empty")
    return token


def ensure_token_file(path: str) -> tuple[str, bool]:
    """The token in `path`, generating it (mode 0600) when the file does not exist.
    Returns (token, generated)."""
    if os.path.exists(path):
        return read_token_file(path), False
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return read_token_file(path), False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
        f.flush()
        os.fsync(f.fileno())
    return token, True


def resolve_token(inline: str, token_file: str, default_path: str) -> tuple[str, str]:
    """(token, where it came from) for the node's config."""
    if inline:
        return inline, "adminToken in the config"
    if token_file:
        return read_token_file(token_file), token_file
    token, generated = ensure_token_file(default_path)
    if generated:
        log.warning("generated an admin token into %s (mode 0600)", default_path)
    return token, default_path


def _deny(message: str):
    def handler(request, context):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
    return handler


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Refuses calls of the protected methods (every method starting with one of `protected`:
    by default the whole Admin service) without `authorization: Bearer <token>`; other calls
    pass. With `signed_admin` (ACL on: cluster/security/access.py `admin_refusal`), a call signed
    MQv2-HMAC-SHA1 by an ACL user with `admin: true` passes too; signed_admin answers None for
    such a call, else why not."""

    def __init__(self, token: str, protected: tuple[str, ...] = (PROTECTED_PREFIX,),
                 signed_admin: Callable[[object], str | None] | None = None) -> None:
        self._expected = f"Bearer {token}".encode()
        self._protected = protected
        self._signed_admin = signed_admin

    def intercept_service(self, continuation, handler_call_details):
        if not handler_call_details.method.startswith(self._protected):
            return continuation(handler_call_details)
        presented = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                presented = value
        if presented is None:
            return _unary_denial(continuation, handler_call_details,
                                 "missing authorization metadata (want 'Bearer <token>')")
        raw = presented.encode() if isinstance(presented, str) else presented
        if self._signed_admin is not None and raw.startswith(b"MQv2-HMAC-SHA1 "):
            reason = self._signed_admin(handler_call_details.invocation_metadata)
            if reason is not None:
                return _unary_denial(continuation, handler_call_details,
                                     f"signed admin call refused: {reason}")
            return continuation(handler_call_details)
        if not hmac.compare_digest(raw, self._expected):
            return _unary_denial(continuation, handler_call_details, "wrong admin token")
        return continuation(handler_call_details)


def _unary_denial(continuation, details, message: str):
    handler = continuation(details)
    if handler is None:
        return None
    deny = _deny(message)
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(deny, handler.request_deserializer,
                                                   handler.response_serializer)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny, handler.request_deserializer,
                                                    handler.response_serializer)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(deny, handler.request_deserializer,
                                                    handler.response_serializer)
    return grpc.stream_stream_rpc_method_handler(deny, handler.request_deserializer,
                                                 handler.response_serializer)
