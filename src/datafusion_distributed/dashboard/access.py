"""Who may read the dashboard.

On a loopback address it answers this machine only, and only requests naming a loopback host
(a web page elsewhere cannot reach it by pointing a name of its own at 127.0.0.1). On any other
address every request must carry the cluster's token: as `Authorization: Bearer <token>`, or
as a short-lived access key in the URL (`?key=...`, made from the token and valid for
`KEY_SECONDS`), which the browser trades for a session cookie on its first visit. Without a
token, a dashboard is never bound to another address.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict

KEY_SECONDS = 600  # an access key in a URL opens the dashboard for this long
SESSION_SECONDS = 12 * 3600  # a browser that showed a key is let in for this long
MAX_SESSIONS = 1000
COOKIE = "dfd_dashboard"


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name, no port) is this machine only.

    Examples:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a Host header, without its port (`[::1]:8080` -> `::1`)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class DashboardAccess:
    """Decides whether a request may read the dashboard (see the module's docstring).

    Args:
        host: the address the dashboard listens on.
        token: the cluster's token (None when it has none).

    Raises:
        ValueError: `host` is not a loopback address and there is no token.
    """

    def __init__(self, host: str, token: str | None) -> None:
        self.loopback = is_loopback(host)
        if not self.loopback and not token:
            raise ValueError(
                f"the dashboard would listen on {host}, where other machines reach it, and the cluster "
                "has no token to require of them: give DistributedConfig.auth_token (or "
                "DATAFUSION_DISTRIBUTED_TOKEN), or keep dashboard_host at 127.0.0.1"
            )
        self._token = token or ""
        self._sessions: OrderedDict[str, float] = OrderedDict()  # cookie value -> valid until
        self._lock = threading.Lock()

    @property
    def needs_token(self) -> bool:
        """Whether requests must carry the token (the dashboard is not on loopback)."""
        return not self.loopback

    def _mac(self, expiry: int) -> str:
        message = f"dashboard-key:{expiry}".encode()
        return hmac.new(self._token.encode(), message, hashlib.sha256).hexdigest()[:32]

    def access_key(self, now: float | None = None) -> str:
        """A key valid for `KEY_SECONDS` from `now`, made from the token (nothing is stored)."""
        expiry = int(now if now is not None else time.time()) + KEY_SECONDS
        return f"{expiry}-{self._mac(expiry)}"

    def key_valid(self, key: str, now: float | None = None) -> bool:
        """Whether `key` was made by `access_key` from this token and has not expired."""
        expiry_text, _, mac = key.partition("-")
        if not expiry_text.isdigit() or not self._token:
            return False
        expiry = int(expiry_text)
        if expiry < (now if now is not None else time.time()):
            return False
        return hmac.compare_digest(mac, self._mac(expiry))

    def new_session(self) -> str:
        """A cookie value letting its browser in for `SESSION_SECONDS`."""
        value = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[value] = time.time() + SESSION_SECONDS
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return value

    def _session_valid(self, value: str) -> bool:
        with self._lock:
            until = self._sessions.get(value)
            if until is not None and until < time.time():
                del self._sessions[value]
                until = None
        return until is not None

    def host_allowed(self, host_header: str | None) -> bool:
        """On loopback, whether the request names a loopback host (else any host will do)."""
        if not self.loopback:
            return True
        return host_header is not None and is_loopback(_host_name(host_header))

    def allowed(self, authorization: str | None, cookies: dict[str, str]) -> bool:
        """Whether a request with these headers may read the dashboard (a key in the URL is
        checked apart: see `key_valid`)."""
        if not self.needs_token:
            return True
        if authorization and authorization.startswith("Bearer "):
            if hmac.compare_digest(authorization[len("Bearer ") :].strip().encode(), self._token.encode()):
                return True
        cookie = cookies.get(COOKIE)
        return cookie is not None and self._session_valid(cookie)
