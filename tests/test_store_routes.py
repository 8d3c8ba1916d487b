"""The routes to the legacy TCPStore backend, run for real in a child process."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
import torch.distributed as dist

from pytest_distbench.families.store import routes

# One xdist worker runs the module (--dist=loadgroup, pyproject.toml): its module fixture
# (every store route checked) would run again in each worker.
pytestmark = pytest.mark.xdist_group("test_store_routes")


@pytest.fixture(scope="module")
def checked():
    return routes.check_routes(timeout_s=120)


def _row(result, how, env):
    [row] = [r for r in result["rows"] if r["how"] == how and r["env"] == env]
    return row


def test_every_route_runs_the_documented_backend(checked):
    assert routes.disagreements(checked["rows"]) == []
    assert len(checked["rows"]) == len(routes.CASES)


def test_precedence_constructor_over_query_over_environment(checked):
    if checked["network"] != "private":
        pytest.skip(f"process-group routes not run here: {checked['network']}")
    assert _row(checked, "TCPStore(use_libuv=False)", "1")["ran"] == "legacy"
    assert _row(checked, "TCPStore(use_libuv=True)", "0")["ran"] == "libuv"
    assert _row(checked, "init_method tcp://...?use_libuv=0", "1")["ran"] == "legacy"
    assert _row(checked, "init_method tcp://...?use_libuv=1", "0")["ran"] == "libuv"
    assert _row(checked, "init_method tcp://...", "0")["ran"] == "legacy"
    assert _row(checked, "init_method env://", "0")["ran"] == "legacy"
    assert _row(checked, "init_method tcp://...", "unset")["ran"] == "libuv"
    # "ran" is cross-checked with the server thread the store started.
    assert _row(checked, "init_method tcp://...", "0")["thread"] == "pt_tcpstore"


def test_listen_fd_legacy_accepts_and_libuv_refuses_or_serves(checked):
    assert _row(checked, "TCPStore(master_listen_fd=fd, use_libuv=False)", "unset")[
        "ran"] == "legacy"
    assert _row(checked, "TCPStore(master_listen_fd=fd)", "unset")["ran"] in (
        routes.NOT_IMPLEMENTED, "libuv")


@pytest.mark.parametrize("use_libuv", [False, True])
def test_listen_fd_store_in_this_process_reports_its_backend(use_libuv):
    # The direct constructor route, here: the server says what it runs and serves a client.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    try:
        server = dist.TCPStore("127.0.0.1", port, 1, True, timedelta(seconds=30),
                               master_listen_fd=sock.fileno(), use_libuv=use_libuv)
    except NotImplementedError:
        assert use_libuv, "legacy must accept a listen fd"
        sock.close()
        return
    sock.detach()  # the store owns the descriptor now
    assert server.libuvBackend is use_libuv
    client = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=30),
                           wait_for_workers=False)
    client.set("k", "v")
    assert server.get("k") == b"v"
    del client, server
