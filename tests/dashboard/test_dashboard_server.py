"""The dashboard's web server: off unless asked for, its page and JSON on loopback, and on any
other address nothing without the cluster's token (a header, or a short-lived key in the URL
traded for a cookie). Every request goes to 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster
from datafusion_distributed.dashboard.access import KEY_SECONDS, DashboardAccess, is_loopback

TOKEN = "a-token-of-the-cluster"


def _get(url: str, path: str = "", headers: dict | None = None, method: str = "GET"):
    """(status, headers, body) of one request to the dashboard at `url`."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(
            method, path or (parts.path + ("?" + parts.query if parts.query else "")), headers=headers or {}
        )
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


@pytest.fixture
def dctx():
    with DistributedContext(SessionContext(), config=DistributedConfig(dashboard_port=0)) as dctx:
        yield dctx


def test_the_dashboard_is_off_unless_asked_for():
    with DistributedContext(SessionContext()) as dctx:
        assert dctx.dashboard_url is None and dctx.engine.dashboard is None


def test_on_loopback_it_serves_its_page_and_json_with_no_token(dctx):
    url = dctx.dashboard_url
    assert url.startswith("http://127.0.0.1:") and "key=" not in url
    dctx.sql("SELECT 42 AS answer").to_arrow_table()

    status, headers, body = _get(url, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"/static/app.js" in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]  # nothing loaded from elsewhere
    for path in ("/static/app.js", "/static/style.css"):
        assert _get(url, path)[0] == 200
    status, headers, body = _get(url, "/api/queries")
    (query,) = json.loads(body)["queries"]
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert (query["sql"], query["state"], query["rows"]) == ("SELECT 42 AS answer", "finished", 1)
    status, _, body = _get(url, f"/api/queries/{query['query_id']}")
    assert status == 200 and json.loads(body)["explain"].startswith(f"Query {query['query_id']}")
    assert _get(url, "/api/queries/nope")[0] == 404
    assert len(json.loads(_get(url, "/api/workers")[2])["workers"]) == 2
    assert _get(url, "/../../etc/passwd")[0] == 404
    assert _get(url, "/static/../server.py")[0] == 404
    assert _get(url, "/", method="POST")[0] == 501


def test_on_loopback_a_request_naming_another_host_is_refused(dctx):
    # a page elsewhere pointing a name of its own at 127.0.0.1 (DNS rebinding) gets nothing
    port = urllib.parse.urlsplit(dctx.dashboard_url).port
    assert _get(dctx.dashboard_url, "/api/queries", {"Host": f"attacker.example:{port}"})[0] == 421
    assert _get(dctx.dashboard_url, "/api/queries", {"Host": f"localhost:{port}"})[0] == 200


def test_closing_the_context_stops_the_dashboard(dctx):
    url = dctx.dashboard_url
    assert _get(url)[0] == 200
    dctx.close()
    with pytest.raises(OSError):
        _get(url)


def test_another_address_without_a_token_is_refused_before_anything_listens():
    config = DistributedConfig(dashboard_port=0, dashboard_host="0.0.0.0", auth_token=None)
    with pytest.raises(ValueError, match="no token"):
        DistributedContext(SessionContext(), workers=["grpc://127.0.0.1:1"], config=config)


@pytest.fixture
def guarded(dctx):
    """The dashboard as on another address (its access rules), still reached over loopback."""
    dashboard = dctx.engine.dashboard
    dashboard.access = DashboardAccess("192.0.2.10", TOKEN)
    return dashboard


def test_elsewhere_every_path_needs_the_token(guarded):
    base = guarded.base_url
    for path in ("/", "/static/app.js", "/api/queries", "/api/workers", "/nope"):
        assert _get(base, path)[0] == 401, path
    assert _get(base, "/api/queries", {"Authorization": "Bearer wrong"})[0] == 401
    assert _get(base, "/api/queries", {"Authorization": f"Bearer {TOKEN}"})[0] == 200
    assert _get(base, "/", {"Cookie": "dfd_dashboard=made-up"})[0] == 401


def test_elsewhere_the_url_carries_a_short_lived_key_traded_for_a_cookie(guarded):
    url = guarded.url
    assert "?key=" in url
    status, headers, _ = _get(url)
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    session = cookie.split(";", 1)[0]
    assert _get(guarded.base_url, "/api/queries", {"Cookie": session})[0] == 200

    key = url.split("key=", 1)[1]
    expiry, mac = key.split("-", 1)
    tampered = f"{int(expiry) + 3600}-{mac}"  # a longer life is not the token's
    assert _get(guarded.base_url, f"/?key={tampered}")[0] == 403
    assert _get(guarded.base_url, f"/?key={expiry}-{'0' * 32}")[0] == 403
    old = guarded.access.access_key(now=0)  # expired long ago
    assert _get(guarded.base_url, f"/?key={old}")[0] == 403


def test_keys_are_made_from_the_token_and_expire():
    access = DashboardAccess("192.0.2.10", TOKEN)
    key = access.access_key(now=1000)
    assert access.key_valid(key, now=1000 + KEY_SECONDS - 1)
    assert not access.key_valid(key, now=1000 + KEY_SECONDS + 1)
    assert not DashboardAccess("192.0.2.10", "another token").key_valid(key, now=1000)
    assert not access.key_valid("garbage") and not access.key_valid("")
    assert DashboardAccess("127.0.0.1", None).needs_token is False
    assert (
        is_loopback("::1"),
        is_loopback("[::1]"),
        is_loopback("10.0.0.5"),
        is_loopback("example.com"),
    ) == (
        True,
        True,
        False,
        False,
    )


def test_a_port_in_use_is_refused_saying_so_and_the_embedded_cluster_stops(dctx, monkeypatch):
    closed = []
    close = EmbeddedCluster.close
    monkeypatch.setattr(EmbeddedCluster, "close", lambda self: (closed.append(self), close(self)))
    port = urllib.parse.urlsplit(dctx.dashboard_url).port
    with pytest.raises(OSError, match=f"the dashboard cannot listen on 127.0.0.1:{port}: .*dashboard_port"):
        DistributedContext(SessionContext(), config=DistributedConfig(dashboard_port=port))
    assert len(closed) == 1  # the embedded cluster the failed context had started
