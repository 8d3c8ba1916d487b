"""JSON values under one key prefix of a torch.distributed store, with bounded waits.

Launcher-mode ranks talk through the launcher's store, which may listen on a real network: what
crosses it is JSON, never pickle.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any


class StoreLost(RuntimeError):
    """The store stopped answering (its host exited or the network failed)."""


class StoreChannel:
    """Every call raises StoreLost, not the store's own RuntimeError, when the store is gone."""

    def __init__(self, store: Any, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.store, method)(*args)
        except RuntimeError as exc:  # torch's DistStoreError and DistNetworkError among them
            raise StoreLost(str(exc)) from exc

    def set(self, key: str, value: Any) -> None:
        self._call("set", self.prefix + key, json.dumps(value, default=repr))

    def get(self, key: str) -> Any:
        return json.loads(self._call("get", self.prefix + key))

    def set_text(self, key: str, text: str) -> None:
        """A value already in JSON."""
        self._call("set", self.prefix + key, text)

    def get_texts(self, keys: list[str]) -> list[bytes]:
        """Several values as they were set, in one round trip."""
        if not keys:
            return []
        return list(self._call("multi_get", [self.prefix + k for k in keys]))

    def compare_set(self, key: str, expected: str, value: str) -> None:
        """Set `value` where the key holds `expected` ("": where it does not exist)."""
        self._call("compare_set", self.prefix + key, expected, value)

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
    """A client of the store at host:port, or its server too when `master`."""
    import torch.distributed as dist

    return dist.TCPStore(host, port, is_master=master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)
