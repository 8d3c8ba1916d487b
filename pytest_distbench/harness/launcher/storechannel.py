"""JSON values under one key prefix of a torch.distributed store, with bounded waits.

Launcher-mode ranks talk through the launcher's store, which may listen on a real network: what
crosses it is JSON, never pickle.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import timedelta
from typing import Any


class StoreLost(RuntimeError):
    """The store stopped answering (its host exited or the network failed)."""


class StoreChannel:
    def __init__(self, store: Any, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def set(self, key: str, value: Any) -> None:
        self.store.set(self.prefix + key, json.dumps(value, default=repr))

    def get(self, key: str) -> Any:
        return json.loads(self.store.get(self.prefix + key))

    def has(self, key: str) -> bool:
        return bool(self.store.check([self.prefix + key]))

    def add(self, key: str, amount: int) -> int:
        return int(self.store.add(self.prefix + key, amount))

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


def open_store(host: str, port: int, *, master: bool, timeout_s: float) -> Any:
    """A client of the store at host:port, or its server too when `master`."""
    import torch.distributed as dist

    return dist.TCPStore(host, port, is_master=master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)
