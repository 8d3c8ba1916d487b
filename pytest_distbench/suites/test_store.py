"""Built-in TCPStore benchmarks (the tcpstore-libuv-backend study) as tests.

    pytest --distbench --pyargs pytest_distbench.suites -k store
    pytest --distbench --pyargs pytest_distbench.suites -k store \
        --distbench-store-clients=64,1024,4096
    pytest --distbench --pyargs pytest_distbench.suites -k "store and barrier" \
        --distbench-store-backend=libuv

Each sized test is parametrized by the plugin over ``clients`` (``--distbench-store-clients``,
the server's world_size, default 64,512: small, because plain ``pytest --distbench`` runs
the suite too) and ``store_backend`` (``--distbench-store-backend``,
default libuv,legacy). The server runs in rank 0 and listens on 127.0.0.1 only; the clients are
threads spread over the other ranks. Every record says which backend the server actually ran.
"""

import pytest

from pytest_distbench.families.store.barrier import run_barrier
from pytest_distbench.families.store.common import store_config
from pytest_distbench.families.store.init import run_init
from pytest_distbench.families.store.ops import run_ops
from pytest_distbench.families.store.routes import run_routes

pytestmark = pytest.mark.distbench


@pytest.fixture
def store_settings(request):
    return store_config(request.config, request.node)


def test_store_init(distbench, tcp_store, clients, store_backend, store_settings):
    run_init(distbench, tcp_store, clients, store_backend, store_settings)


def test_store_barrier(distbench, tcp_store, clients, store_backend, store_settings):
    run_barrier(distbench, tcp_store, clients, store_backend, store_settings)


def test_store_ops(distbench, tcp_store, clients, store_backend, store_settings):
    run_ops(distbench, tcp_store, clients, store_backend, store_settings)


def test_store_legacy_routes(distbench, tcp_store, store_settings):
    run_routes(distbench, tcp_store, store_settings.timeout_s)
