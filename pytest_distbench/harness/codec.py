"""Typed messages to and from JSON, whole: the one codec of every wire dataclass.

A message is rebuilt from its class's type hints, field by field and nested dataclasses
included, so what a rank sends through a launcher's store comes back as the object it sent
over a local pipe. Reading checks every field's type on the way: a peer's bytes that are not
the message raise WireError naming the field, never an AttributeError three calls later.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar, Union

T = TypeVar("T")


class WireError(ValueError):
    """A message that is not what the wire carries."""


def to_json(message: Any) -> Any:
    """The message as JSON values: dataclasses as objects, tuples as lists."""
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return {f.name: to_json(getattr(message, f.name)) for f in dataclasses.fields(message)}
    if isinstance(message, (list, tuple)):
        return [to_json(v) for v in message]
    if isinstance(message, dict):
        return {k: to_json(v) for k, v in message.items()}
    return message


def from_json(cls: type[T], data: Any) -> T:
    """An instance of the dataclass `cls` from its JSON values; WireError when they are not."""
    return _read(cls, data, cls.__name__)


@functools.cache
def _hints(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _read(hint: Any, value: Any, where: str) -> Any:
    if hint is Any:
        return value
    if dataclasses.is_dataclass(hint):
        return _read_dataclass(hint, value, where)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"{where}: the codec reads one type or None, not {hint}")
        return _read(kinds[0], value, where)
    if origin is list:
        _expect(value, list, where)
        return [_read(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        _expect(value, list, where)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise WireError(f"{where} has {len(value)} items, not {len(args)}")
        pairs = enumerate(zip(args, value, strict=True))
        return tuple(_read(a, v, f"{where}[{i}]") for i, (a, v) in pairs)
    if origin is dict:
        _expect(value, dict, where)
        if not all(isinstance(k, str) for k in value):
            raise WireError(f"{where} has a key that is not a string")
        return {k: _read(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise WireError(f"{where} is {type(value).__name__}, not a number")
        try:
            return float(value)
        except OverflowError:
            raise WireError(f"{where} is out of a float's range") from None
    if hint in (int, str, bool):
        if type(value) is not hint:
            raise WireError(f"{where} is {type(value).__name__}, not {hint.__name__}")
        return value
    raise TypeError(f"{where}: the codec cannot read {hint}")


def _read_dataclass(cls: type, value: Any, where: str) -> Any:
    _expect(value, dict, where)
    hints = _hints(cls)
    names = {name for name, _ in hints}
    if set(value) != names:
        extra, missing = sorted(set(value) - names), sorted(names - set(value))
        raise WireError(f"{where} is not a {cls.__name__}: "
                        + "; ".join(s for s in (f"unknown fields {extra}" if extra else "",
                                                f"missing fields {missing}" if missing else "")
                                    if s))
    return cls(**{name: _read(hint, value[name], f"{where}.{name}") for name, hint in hints})


def _expect(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        raise WireError(f"{where} is {type(value).__name__}, not {kind.__name__}")
