"""The loopback choices of a local world, without ranks."""

from __future__ import annotations

import socket

import listeners

from pytest_distbench.harness.local import loopback
from pytest_distbench.harness.local.world import World, WorldKey


def test_loopback_interface_is_found_by_its_flags(tmp_path):
    for name, flags in (("eth0", "0x1003"), ("lo0", "0x9"), ("wlan0", "0x1003")):
        (tmp_path / "class/net" / name).mkdir(parents=True)
        (tmp_path / "class/net" / name / "flags").write_text(flags + "\n")
    assert loopback.loopback_interface(tmp_path) == "lo0"
    assert loopback.loopback_interface(tmp_path / "missing") == "lo"


def test_rank_environment_names_the_interface_for_every_listener():
    env = loopback.rank_listen_env("lo")
    assert env == {"GLOO_SOCKET_IFNAME": "lo", "TP_SOCKET_IFNAME": "lo",
                   "NCCL_SOCKET_IFNAME": "lo"}


def test_loopback_only_is_a_parameter_of_world_start_up(tmp_path):
    key = WorldKey(2, "gloo", "cpu")
    common = dict(store_host="127.0.0.1", store_port=1, store_prefix="w/",
                  capture_dir=tmp_path, timeout_s=5)
    local = World(key, **common, env={"IBV_FORK_SAFE": "1"})
    assert local.rank_env["GLOO_SOCKET_IFNAME"] == loopback.loopback_interface()
    assert local.rank_env["IBV_FORK_SAFE"] == "1"
    launcher = World(key, **common, loopback_only=False)
    assert launcher.rank_env == {}


def test_store_accepts_on_loopback_only():
    store = loopback.loopback_store(timeout_s=10)
    port = store.port
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    bound = [address for address, p in listeners.listening() if p == port]
    assert bound == ["127.0.0.1"]  # not 0.0.0.0, not ::
