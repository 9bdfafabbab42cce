"""The pieces of `benchmarks/shared_nothing.py` (which the suite does not run): its network
settings, its model, the delaying proxy, and a tiny run without a simulated network."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the benchmarks import each other by name
    import netsim
    import shared_nothing

    return shared_nothing, netsim


def test_network_settings_are_read_from_text(runner):
    _, netsim = runner
    assert netsim.NetworkSetting.parse("unlimited") == netsim.NetworkSetting("unlimited", None, 0.0)
    one_gbit = netsim.NetworkSetting.parse("1gbit/1ms")
    assert (one_gbit.rate_mbit, one_gbit.delay_ms, one_gbit.bytes_per_second) == (1000.0, 1.0, 125e6)
    assert netsim.NetworkSetting.parse("100MBIT").delay_ms == 0.0
    for bad in ("fast", "100mb/5ms", "0mbit", "1gbit/ms"):
        with pytest.raises(ValueError, match="network"):
            netsim.NetworkSetting.parse(bad)


def test_arguments(runner):
    shared_nothing, _ = runner
    args = shared_nothing.parse_args(["--sf", "0.1", "--queries", "3,18"])
    assert [s.name for s in args.networks] == ["unlimited", "1gbit/1ms", "100mbit/5ms"]
    assert args.query_numbers == [3, 18] and args.workers == 3
    with pytest.raises(SystemExit):
        shared_nothing.parse_args(["--networks", "1gbit/1ms,slow"])
    with pytest.raises(SystemExit):
        shared_nothing.parse_args(["--iterations", "0"])


def test_the_model_adds_the_transfer_over_every_link_and_two_round_trips_per_stage(runner):
    shared_nothing, netsim = runner
    setting = netsim.NetworkSetting.parse("100mbit/5ms")  # 12.5 MB/s a link, round trip 10 ms
    model = shared_nothing.modelled_seconds(1.0, 25_000_000, 3, setting, workers=2)
    assert model == pytest.approx(1.0 + 25 / 12.5 / 2 + 3 * 2 * 0.010)
    unlimited = netsim.NetworkSetting.parse("unlimited")
    assert shared_nothing.modelled_seconds(1.0, 25_000_000, 3, unlimited, workers=2) == 1.0


def receive(conn: socket.socket, size: int) -> bytes:
    """Up to `size` bytes from `conn`, fewer if it closes first."""
    received = b""
    while len(received) < size:
        data = conn.recv(65536)
        if not data:
            break
        received += data
    return received


def test_the_delaying_proxy_forwards_every_byte_both_ways(runner):
    _, netsim = runner
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)
    payload = bytes(range(256)) * 4096  # 1 MiB, more than one chunk

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(receive(conn, len(payload)))

    threading.Thread(target=echo, daemon=True).start()
    proxies = netsim.DelayProxies([("127.0.0.1", "127.0.0.1", server.getsockname()[1])])
    try:
        proxies.set_delay_ms(2)
        with socket.create_connection(("127.0.0.1", proxies.ports[0]), timeout=30) as client:
            client.sendall(payload)
            echoed = receive(client, len(payload))
        assert echoed == payload
    finally:
        proxies.close()
        server.close()
    assert not proxies.process.is_alive()


@pytest.mark.not_a_distributed_run  # the benchmark runner's own check of its answers
def test_a_tiny_run_without_a_simulated_network(runner, tmp_path, capsys):
    shared_nothing, _ = runner
    out = tmp_path / "result.json"
    args = ["--sf", "0.01", "--queries", "3", "--iterations", "1", "--warmup", "0", "--workers", "2"]
    assert shared_nothing.main([*args, "--no-namespaces", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["sides"] == ["single", "shared", "loopback"] and not result["meta"]["simulated"]
    q03 = result["queries"]["q03"]
    assert q03["error"] is None and set(q03["model"]) == {"net unlimited", "net 1gbit/1ms", "net 100mbit/5ms"}
    assert q03["shared"]["fetched_bytes"] == 0  # read in place
    assert "model net 100mbit/5ms" in capsys.readouterr().out
    assert shared_nothing.main(["--report", str(out)]) == 0  # the tables again, from the file
    assert "| q03 |" in capsys.readouterr().out
