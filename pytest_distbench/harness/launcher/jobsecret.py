"""The job's secret: what the launcher's store never carries, handed to every rank out of band.

The job script sets it on every node before the launcher starts the ranks, in one of two ways
(the names below are the only place they are spelled; docs/launchers.md shows a job script):
the secret itself in DISTBENCH_SECRET, or the path of a file holding it, readable by its owner
alone, in DISTBENCH_SECRET_FILE. The seal of every value the ranks act on is keyed by it
(runkey.py), so a process that can write the store but cannot read the secret cannot forge one.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field

SECRET_ENV = "DISTBENCH_SECRET"
SECRET_FILE_ENV = "DISTBENCH_SECRET_FILE"
MIN_CHARS = 16  # a guessable secret seals nothing; secrets.token_hex(32) gives 64
MAX_BYTES = 64 << 10


class SecretError(ValueError):
    """The job's secret is given but cannot be used; the message names the variable or file."""


@dataclass(frozen=True)
class JobSecret:
    value: bytes = field(repr=False)  # never in a repr, a log or a traceback's locals
    source: str  # where it came from, for messages: the variable or the file


def read(env: Mapping[str, str] | None = None) -> JobSecret | None:
    """The job's secret from the environment, None when the job gives none; SecretError when
    it gives one that cannot be used."""
    env = os.environ if env is None else env
    inline, path = env.get(SECRET_ENV), env.get(SECRET_FILE_ENV)
    if inline is not None and path is not None:
        raise SecretError(f"both {SECRET_ENV} and {SECRET_FILE_ENV} are set: give the job's "
                          "secret one way")
    if inline is not None:
        # os.environ keeps bytes that are not UTF-8 as surrogates: they are the secret's too.
        return JobSecret(_checked(inline.encode("utf-8", "surrogateescape"), SECRET_ENV),
                         SECRET_ENV)
    if path is not None:
        if not path:
            raise SecretError(f"{SECRET_FILE_ENV} is set but empty: name the secret's file")
        where = f"{SECRET_FILE_ENV}={path!r}"
        return JobSecret(_checked(_read_private(path, where), where), where)
    return None


def _read_private(path: str, where: str) -> bytes:
    """The file's bytes, when it is a regular file of this user that no one else can read or
    write (one they can read gives them the secret; one they can write, a secret they chose)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise SecretError(f"{where}: cannot open the secret's file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)  # of what was opened, not of what the name points to later
        if not stat.S_ISREG(st.st_mode):
            raise SecretError(f"{where}: the secret's file is not a regular file")
        if st.st_uid != os.geteuid():
            raise SecretError(f"{where}: the secret's file belongs to user id {st.st_uid}, not "
                              f"to this user ({os.geteuid()}): its owner can read it")
        if st.st_mode & 0o077:
            raise SecretError(f"{where}: the secret's file is open to group or others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); make it readable by its owner "
                              "alone (chmod 600)")
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SecretError(f"{where}: cannot read the secret's file: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise SecretError(f"{where}: the secret's file is over {MAX_BYTES >> 10} KiB")
    return b"".join(chunks)


def _checked(value: bytes, where: str) -> bytes:
    """The secret without surrounding blanks (a file written by `echo` ends with a newline, as
    a variable set from it does not), refused when too short to be one."""
    value = value.strip()
    if len(value) < MIN_CHARS:
        raise SecretError(f"{where}: the job's secret has {len(value)} characters, fewer than "
                          f"{MIN_CHARS}: use a random one, e.g. python -c 'import secrets; "
                          "print(secrets.token_hex(32))'")
    return value
