"""Authentication and TLS for the Flight connections between coordinators and workers.

Every call to a worker carries the header `authorization: Bearer <token>`; a worker compares it
with its own token in constant time and refuses any call without it, or with another token, with
`FlightUnauthenticatedError("unauthenticated: ...")` before the call reaches its handler. The
token is a shared secret: give the same one to every worker and every coordinator of a cluster
(`--auth-token` or the environment variable below on workers, `DistributedConfig.auth_token` on
coordinators). A token is not encryption: use TLS on networks others can read.

The token is checked by server middleware, which gRPC runs only once it has read a call's whole
request: an unauthenticated caller is refused before the worker's code runs, but the bytes it
sent were received first. Mutual TLS refuses a client without a certificate signed by a CA the
worker trusts during the TLS handshake, before it can send any request.
"""

from __future__ import annotations

import hmac
import secrets

import pyarrow.flight as flight

from ..common.tokens import TOKEN_ENV

MAX_TOKEN_CHARS = 4096


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """`token` unchanged if it is usable (non-empty printable text without spaces, not too long), else ValueError."""
    if not isinstance(token, str) or not token.strip():
        raise ValueError("the authentication token must be a non-empty string")
    if len(token) > MAX_TOKEN_CHARS or any(c.isspace() or not c.isprintable() for c in token):
        raise ValueError(
            f"the authentication token must be printable, without spaces, at most {MAX_TOKEN_CHARS}"
        )
    return token


class _Authenticated(flight.ServerMiddleware):
    pass


WORKERS_TOKEN_HINT = f"set DistributedConfig.auth_token or {TOKEN_ENV} to the workers' token"


class TokenServerMiddlewareFactory(flight.ServerMiddlewareFactory):
    """Refuses every call that does not carry `authorization: Bearer <token>`, before it does
    any work; `hint` tells a caller without a token how to send it, and `owner` whose token
    a wrong one does not match."""

    def __init__(self, token: str, *, hint: str = WORKERS_TOKEN_HINT, owner: str = "this worker's") -> None:
        self._expected = f"Bearer {check_token(token)}".encode()
        self._hint, self._owner = hint, owner

    def start_call(
        self, info: flight.CallInfo, headers: dict[str, list[str | bytes]]
    ) -> flight.ServerMiddleware:
        """Let the call through if it carries this worker's token; else raise FlightUnauthenticatedError."""
        values = headers.get("authorization") or headers.get("Authorization") or []
        if not values:
            raise flight.FlightUnauthenticatedError(
                f"unauthenticated: the call carries no token ({self._hint})"
            )
        given = values[0]
        given = given.encode() if isinstance(given, str) else bytes(given)
        if not hmac.compare_digest(given, self._expected):
            raise flight.FlightUnauthenticatedError(
                f"unauthenticated: the token does not match {self._owner}"
            )
        return _Authenticated()


class _BearerToken(flight.ClientMiddleware):
    def __init__(self, header: str) -> None:
        self._header = header

    def sending_headers(self):
        return {"authorization": self._header}

    def received_headers(self, headers):
        pass

    def call_completed(self, exception):
        pass


class TokenClientMiddlewareFactory(flight.ClientMiddlewareFactory):
    """Adds `authorization: Bearer <token>` to every call."""

    def __init__(self, token: str) -> None:
        self._header = f"Bearer {check_token(token)}"

    def start_call(self, info: flight.CallInfo) -> flight.ClientMiddleware:
        """Middleware that sends the token with this call."""
        return _BearerToken(self._header)


def read_pem(path_or_pem: str | bytes | None) -> bytes | None:
    """PEM bytes from a path, or the PEM text itself."""
    if path_or_pem is None:
        return None
    if isinstance(path_or_pem, bytes):
        return path_or_pem
    if path_or_pem.lstrip().startswith("-----BEGIN"):
        return path_or_pem.encode()
    with open(path_or_pem, "rb") as f:
        return f.read()


def connect_options(
    auth_token: str | None,
    tls_root_certs: bytes | None,
    client_cert: bytes | None = None,
    client_key: bytes | None = None,
) -> dict:
    """Keyword arguments of `pyarrow.flight.connect` for a client with this token, these CAs,
    and this client certificate and key (PEM) to present to workers that ask for one."""
    options: dict = {}
    if auth_token:
        options["middleware"] = [TokenClientMiddlewareFactory(auth_token)]
    if tls_root_certs:
        options["tls_root_certs"] = tls_root_certs
    if client_cert:
        options["cert_chain"] = client_cert
        options["private_key"] = client_key
    return options


def is_tls_failure(message: str) -> bool:
    """Whether a transport error is a failed TLS handshake (a setup error, not a lost worker)."""
    lowered = message.lower()
    return "handshake failed" in lowered or "certificate verify failed" in lowered


CLIENT_CERTIFICATE_REFUSED = (
    "the worker closed the connection during the TLS handshake: it asks for a client certificate, "
    "and this client presented none or one not signed by a CA it trusts (set "
    "DistributedConfig.tls_client_cert and tls_client_key)"
)


def is_client_certificate_refused(message: str) -> bool:
    """Whether connecting to a `grpc+tls://` worker failed the way a worker that requires client
    certificates refuses a client without an accepted one: it closes the connection during the
    handshake (gRPC reports only a closed socket)."""
    lowered = message.lower()
    return "failed to connect to all addresses" in lowered and "socket closed" in lowered
