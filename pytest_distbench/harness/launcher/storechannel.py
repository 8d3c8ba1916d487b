"""JSON values under one key prefix of a torch.distributed store, with bounded waits.

Launcher-mode ranks talk through the launcher's store, which may listen on a real network: what
crosses it is JSON, never pickle. Once the ranks agreed on the run's seal (seal.py), every value
set is sealed and every value read is opened: one that no rank of the run wrote is Forged.
Counters (`add`) and markers read only by their presence (`has`, `wait`) carry no seal.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from .seal import Forged, Seal


class StoreLost(RuntimeError):
    """The store stopped answering (its host exited or the network failed)."""


class StoreChannel:
    """Every call raises StoreLost, not the store's own RuntimeError, when the store is gone."""

    def __init__(self, store: Any, prefix: str, seal: Seal | None = None) -> None:
        self.store = store
        self.prefix = prefix
        self.seal = seal  # None until the ranks agreed on it (after the collection round)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.store, method)(*args)
        except RuntimeError as exc:  # torch's DistStoreError and DistNetworkError among them
            raise StoreLost(str(exc)) from exc

    def _sealed(self, key: str, text: str) -> str | bytes:
        return text if self.seal is None else self.seal.seal(self.prefix + key, text)

    def _opened(self, key: str, raw: bytes) -> bytes:
        return raw if self.seal is None else self.seal.open(self.prefix + key, raw)

    def set(self, key: str, value: Any) -> None:
        self.set_text(key, json.dumps(value, default=repr))

    def get(self, key: str) -> Any:
        """The value under `key`; Forged when no rank of the run wrote it."""
        return json.loads(self._opened(key, self._call("get", self.prefix + key)))

    def set_text(self, key: str, text: str) -> None:
        """A value already in JSON."""
        self._call("set", self.prefix + key, self._sealed(key, text))

    def get_texts(self, keys: list[str]) -> list[bytes | Forged]:
        """Several values as they were set, in one round trip; in place of each one that no
        rank of the run wrote, its Forged."""
        if not keys:
            return []
        raws = self._call("multi_get", [self.prefix + k for k in keys])
        found: list[bytes | Forged] = []
        for key, raw in zip(keys, raws, strict=True):
            try:
                found.append(self._opened(key, raw))
            except Forged as exc:
                found.append(exc)
        return found

    def mark(self, key: str, text: str) -> None:
        """Set `text` where the key does not exist yet (a value posted meanwhile stays)."""
        self._call("compare_set", self.prefix + key, "", self._sealed(key, text))

    def delete(self, key: str) -> None:
        self._call("delete_key", self.prefix + key)

    def has(self, key: str) -> bool:
        return bool(self._call("check", [self.prefix + key]))

    def add(self, key: str, amount: int) -> int:
        return int(self._call("add", self.prefix + key, amount))

    def wait(self, keys: Iterable[str], timeout_s: float) -> bool:
        """True once every key exists, False after timeout_s; StoreLost if the store is gone."""
        from torch.distributed import DistStoreError

        names = [self.prefix + k for k in keys]
        if not names:
            return True
        try:
            self.store.wait(names, timedelta(seconds=max(timeout_s, 0.001)))
        except DistStoreError as exc:
            if "timeout" in str(exc).lower() or "timed out" in str(exc).lower():
                return False
            raise StoreLost(str(exc)) from exc
        except RuntimeError as exc:
            raise StoreLost(str(exc)) from exc
        return True

    def poll(self, keys: list[str], timeout_s: float, every_s: float = 0.02) -> bool:
        """`wait` without torch's warning when it times out: for short waits that may."""
        deadline = time.monotonic() + timeout_s
        names = [self.prefix + k for k in keys]
        while not self._call("check", names):
            if time.monotonic() >= deadline:
                return False
            time.sleep(every_s)
        return True


def open_store(host: str, port: int, *, master: bool, timeout_s: float) -> Any:
    """A client of the store at host:port, or its server too when `master`: at a loopback
    address, listening there alone (TCPStore's own server listens on every interface,
    whatever host it is given)."""
    import torch.distributed as dist

    listener = _loopback_listener(host, port) if master else None
    return dist.TCPStore(host, port, is_master=master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False, master_listen_fd=listener)


def _loopback_listener(host: str, port: int) -> int | None:
    """A socket listening at host:port when host is a loopback address (its descriptor, handed
    to the store's server); None for any other host, which the other hosts' ranks must reach."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: what the other ranks resolve it to is theirs
    if not address.is_loopback:
        return None
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(socket.SOMAXCONN)
    except OSError as exc:  # as the store's own server would say it (a RuntimeError)
        listener.close()
        raise RuntimeError(f"the store cannot listen at {host}:{port}: {exc}") from exc
    return listener.detach()  # the store's server owns it from here
