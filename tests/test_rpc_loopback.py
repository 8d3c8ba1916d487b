"""A local world listens on loopback only, even where the hostname resolves to a LAN address.

Each test runs in its own network/UTS/mount namespace: loopback up, an extra address (10.77.0.1)
on lo, and a hostname that resolves to it through a bind-mounted hosts file.  The control case
(torch's defaults, no plugin) shows gloo pairs and TensorPipe binding to 10.77.0.1 and a
TCPStore master on every interface; the plugin's session in the same setting shows nothing but
loopback listeners.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
EXTRA_ADDRESS = "10.77.0.1"
SETUP = f"""#!/bin/sh
set -e
ip link set lo up
ip addr add {EXTRA_ADDRESS}/32 dev lo
hostname distbench-exposed
hosts="$PWD/namespace-hosts"  # in the test's own directory: nothing left in /tmp
printf '127.0.0.1 localhost\\n{EXTRA_ADDRESS} distbench-exposed\\n' > "$hosts"
mount --bind "$hosts" /etc/hosts
exec "$@"
"""
INNER_TEST = """
import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

import listeners


def test_listeners(distbench, rpc_agent, process_group):
    x = torch.ones(4)
    dist.all_reduce(x, group=process_group)
    if rpc_agent.rank == 0:
        rpc.rpc_sync(rpc_agent.worker_names[1], max, args=(1, 2))
        sockets = listeners.listening()
        print("LISTENING", sockets)
        assert len(sockets) >= 3, "fewer listeners than store + gloo + TensorPipe"
        assert listeners.off_loopback(sockets) == []
"""


def _namespace_or_skip() -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot create namespaces here: {probe.stderr.strip()}")


@pytest.fixture
def namespace(pytester: pytest.Pytester, leak_tag: str):
    _namespace_or_skip()
    setup = pytester.path / "setup.sh"
    setup.write_text(SETUP)
    setup.chmod(0o755)
    (pytester.path / "listeners.py").write_text((HERE / "listeners.py").read_text())
    return ["unshare", "--net", "--uts", "--mount", str(setup)]


def test_torch_defaults_listen_off_loopback(pytester, namespace):
    # The control: without the plugin's choices the namespace does expose the world.
    (pytester.path / "exposed_world.py").write_text((HERE / "exposed_world.py").read_text())
    result = pytester.run(*namespace, sys.executable, "exposed_world.py", timeout=240)
    line = next(x for x in result.stdout.lines if x.startswith("EXPOSED"))
    assert EXTRA_ADDRESS in line, line  # gloo pairs and TensorPipe on the hostname's address
    assert "('::'," in line or "('0.0.0.0'," in line, line  # the store on every interface


def test_local_world_listens_on_loopback_only(pytester, namespace):
    pytester.makepyfile(test_inner=INNER_TEST)
    result = pytester.run(*namespace, sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                          "--distbench", "--world-size=2", "-rA", "test_inner.py", timeout=240)
    result.assert_outcomes(passed=1)
    assert "LISTENING [('127.0.0.1'" in result.stdout.str()
