"""The dashboard's web server: the page and its files from `static/`, and the JSON it polls
(`/api/queries`, `/api/queries/<id>`, `/api/workers`).

A `ThreadingHTTPServer` of the standard library on a thread of its own; each request is
answered from copies of the history, so a page never holds up a query. Who may read it is
`access.DashboardAccess`'s call.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import views
from .access import COOKIE, SESSION_SECONDS, DashboardAccess
from .history import QueryHistory
from .workers import WorkerStatus

log = logging.getLogger("datafusion_distributed.dashboard")

STATIC = {  # the files the page is made of: no other path is ever read
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
# the page loads nothing from elsewhere, runs no inline script, and is framed by nobody
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # a key in the URL never leaves in a Referer
    "X-Frame-Options": "DENY",
}


def _static(name: str) -> bytes:
    return resources.files(__package__).joinpath("static").joinpath(name).read_bytes()


class Dashboard:
    """Serves the dashboard of one coordinator until `close`.

    Args:
        history: the coordinator's queries.
        workers: its workers' state.
        host, port: where to listen (port 0: a free one).
        token: the cluster's token, required of requests when `host` is not loopback.

    Raises:
        ValueError: `host` is not loopback and there is no token.
        OSError: the port cannot be bound.
    """

    def __init__(
        self, history: QueryHistory, workers: WorkerStatus, host: str, port: int, token: str | None
    ) -> None:
        self.history = history
        self.workers = workers
        self.access = DashboardAccess(host, token)
        self.host = host
        try:
            self._server = ThreadingHTTPServer((host, port), _Handler)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"the dashboard cannot listen on {host}:{port}: {exc.strerror or exc}; give another "
                "dashboard_port (0 picks a free one) or dashboard_host",
            ) from exc
        self._server.daemon_threads = True
        self._server.dashboard = self  # type: ignore[attr-defined]
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="dashboard", daemon=True)
        self._thread.start()
        log.info("dashboard at %s", self.base_url)

    @property
    def base_url(self) -> str:
        """The dashboard's address, without an access key."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def url(self) -> str:
        """The URL to open: with a fresh access key when the dashboard requires the token."""
        if not self.access.needs_token:
            return self.base_url
        return f"{self.base_url}?key={self.access.access_key()}"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- answers ------------------------------------------------------------------------
    def api(self, path: str) -> tuple[int, Any]:
        """The status and JSON value of an `/api/...` path."""
        if path == "/api/queries":
            return 200, {"queries": views.queries(self.history)}
        if path.startswith("/api/queries/"):
            detail = views.query_detail(self.history, path[len("/api/queries/") :])
            return (200, detail) if detail is not None else (404, {"error": "no such query in the history"})
        if path == "/api/workers":
            states = self.workers.states(wait=False)
            return 200, {"workers": [views.worker_row(s) for s in states]}
        return 404, {"error": "not found"}


class _Handler(BaseHTTPRequestHandler):
    server_version = "datafusion-distributed-dashboard"
    protocol_version = "HTTP/1.1"

    @property
    def dashboard(self) -> Dashboard:
        return self.server.dashboard  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s %s", self.address_string(), format % args)

    def do_HEAD(self) -> None:  # noqa: N802 - the base class's name
        self._answer(head=True)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        access = self.dashboard.access
        if not access.host_allowed(self.headers.get("Host")):
            self._send(
                HTTPStatus.MISDIRECTED_REQUEST,
                b"this dashboard answers to a loopback host name only\n",
                "text/plain",
                head,
            )
            return
        parts = urlsplit(self.path)
        key = parse_qs(parts.query).get("key")
        if key and access.needs_token:
            if not access.key_valid(key[0]):
                self._send(
                    HTTPStatus.FORBIDDEN,
                    b"this access key is wrong or has expired: ask for a new URL (dashboard_url)\n",
                    "text/plain",
                    head,
                )
                return
            cookie = f"{COOKIE}={access.new_session()}; Path=/; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}"
            self._send(
                HTTPStatus.SEE_OTHER,
                b"",
                "text/plain",
                head,
                {"Location": parts.path or "/", "Set-Cookie": cookie},
            )
            return
        cookies = {
            name: morsel.value for name, morsel in SimpleCookie(self.headers.get("Cookie", "")).items()
        }
        if not access.allowed(self.headers.get("Authorization"), cookies):
            self._send(
                HTTPStatus.UNAUTHORIZED,
                b"this dashboard needs the cluster's token: open the URL DistributedContext.dashboard_url gives\n",
                "text/plain",
                head,
            )
            return
        path = parts.path
        if path in STATIC:
            name, kind = STATIC[path]
            try:
                body = _static(name)
            except OSError as exc:  # an install without the page's files
                log.error("dashboard file %s missing: %s", name, exc)
                self._send(
                    HTTPStatus.INTERNAL_SERVER_ERROR,
                    b"the dashboard's files are missing\n",
                    "text/plain",
                    head,
                )
                return
            self._send(HTTPStatus.OK, body, kind, head)
            return
        if path.startswith("/api/"):
            try:
                status, value = self.dashboard.api(path)
            except Exception as exc:  # a page must get an answer, and the query never sees this
                log.exception("dashboard %s failed", path)
                status, value = 500, {"error": f"{type(exc).__name__}: {exc}"}
            body = json.dumps(value, default=str).encode()
            self._send(HTTPStatus(status), body, "application/json", head, {"Cache-Control": "no-store"})
            return
        self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", head)

    def _send(
        self, status: HTTPStatus, body: bytes, kind: str, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)
