"""Results files on disk: written atomically, read back strictly, named by baselines.

Any problem with a file is a ResultsFileError whose message names the file and the field.
Every file the package writes (results, baselines, plots, markdown) goes through
write_output or append_output: a regular file is replaced atomically (through a symlink, at
its target), a character device or a FIFO is written through, anything else is refused.
Neither leaves anything behind when SIGINT or SIGTERM comes mid-write (sigterm_interrupts):
the temporary file is removed, an append cut off, and the interrupt goes on up.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import secrets
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...units import format_size
from . import nccl_tests
from .schema import SchemaError, is_number, validate_document
from .upgrade import upgraded

# The largest results file read, and the most JSON values parsed from it (docs/results-schema.md,
# "Validation"): a bound on what parsing builds, whatever the file's shape. 3 million samples
# (one duration-mode record's most) at 2 ranks are 12 million values in about 260 MiB (5 ranks
# fit); a benchmark of 30 samples at 2 ranks, 292 values in 5.5 KB (95,000 fit). A value costs
# 32 to 67 bytes once parsed (a float in a list; an object of one key), the text 1 byte a
# character (parse_problem keeps wider text to as many bytes), so what a file at the bounds
# may take is bounded: docs/failure-model.md states it, measured.
MAX_RESULTS_BYTES = 2**29
MAX_RESULTS_VALUES = 2**25
NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems
# Opening a FIFO must neither wait for the other end nor leak into children (POSIX only).
_OPEN_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)

_BASELINE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


class ResultsFileError(Exception):
    """A results file that cannot be written or used; str() names the file and the field."""

    def __init__(self, path: str | os.PathLike[str], message: str, field: str | None = None):
        self.path = os.fspath(path)
        self.field = field
        self.message = message
        # What is wrong, for a line that names the file itself.
        self.reason = f"{field}: {message}" if field else message
        super().__init__(f"{self.path}: {self.reason}")


class ResultsFileExistsError(ResultsFileError):
    """Raised by write_document when the target exists and overwrite was not allowed.

    A separate class so the plugin can catch it and name its own command-line flag.
    """


def write_document(doc: dict[str, Any], path: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Write ``doc`` to ``path`` atomically: readers see the old file or the new one, never half.

    Refuses to replace an existing file unless ``overwrite`` is true
    (ResultsFileExistsError, a ResultsFileError).
    """
    if not overwrite and Path(path).exists():
        raise _exists_error(path)
    try:
        data = _dumps(doc).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultsFileError(path, f"cannot serialize the results: {exc}") from None
    # A file its own reader would refuse is not written: compare, plot and the next
    # --distbench-append would fail on it later, and the file it would replace stays.
    problem = parse_problem(data, MAX_RESULTS_VALUES, MAX_RESULTS_BYTES, "a results file")
    if problem:
        raise ResultsFileError(path, f"not written: the document {problem}{_largest(doc)}")
    try:
        write_output(path, data, overwrite=overwrite)
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError as exc:
        raise ResultsFileError(path, f"cannot write: {exc.strerror or exc}") from None


def _largest(doc: dict[str, Any]) -> str:
    """What takes the room in a document too large to write: its longest sample lists (each
    written 2 + ranks times: samples, stats.data and one list per rank)."""
    records = [b.get("distbench") for b in doc.get("benchmarks") or () if isinstance(b, dict)]
    sizes = sorted(((len(r.get("samples") or ()), str(r.get("id")), r.get("world_size"))
                    for r in records if isinstance(r, dict)), reverse=True)
    if not sizes or not sizes[0][0]:
        return ""
    shown = ", ".join(f"{name} ({count:,} samples at {ranks} ranks)"
                      for count, name, ranks in sizes[:3])
    count = f"{len(sizes)} benchmark{'' if len(sizes) == 1 else 's'}"
    return (f"; the longest sample lists of its {count}: {shown}. Fewer points "
            "per session (-k) or a shorter --distbench-duration or --distbench-budget keep a "
            "file within it")


def write_output(path: str | os.PathLike[str], data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` as the file ``path`` names, never replacing what is not a regular file.

    A regular file (or none) is written beside its final target and renamed over it, so a
    symlink stays a symlink and readers see the old content or the new, never half; without
    ``overwrite`` an existing target is a FileExistsError. A character device or a FIFO with
    a reader is written through (``/dev/stdout``, a pipe); anything else is an OSError whose
    message says what the path is. Errors of the device itself (ENOSPC) are raised as they are.
    """
    target = Path(os.path.realpath(path))
    mode = _mode(target)
    if mode is not None and not stat.S_ISREG(mode):
        _write_through(path, target, mode, data)
        return
    directory = target.parent
    tmp: Path | None = None
    try:
        with sigterm_interrupts():  # the finally below removes the temporary file
            directory.mkdir(parents=True, exist_ok=True)
            tmp, fd = _create_temp(directory, target.name)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            with _interrupts_held():  # renamed and forgotten, or neither: never half of it
                _publish(path, tmp, target, overwrite)
                tmp = None
        _fsync_directory(directory)
    finally:
        if tmp is not None:
            try:
                tmp.unlink()
            except OSError:
                pass


def _publish(path: str | os.PathLike[str], tmp: Path, target: Path, overwrite: bool) -> None:
    if overwrite:
        # Between the check in write_output and here someone may have put a device or a FIFO
        # in its place: a rename over it would destroy it, so the check is made again.
        now = _mode(target)
        if now is not None and not stat.S_ISREG(now):
            raise OSError(f"{path} became {_kind(now)} while written; not replaced")
        os.replace(tmp, target)
    else:
        _publish_no_clobber(tmp, target)


def interrupting_signal(interrupt: KeyboardInterrupt) -> signal.Signals:
    """The signal an interrupt came of: SIGTERM where sigterm_interrupts raised it, else
    Ctrl-C's SIGINT."""
    return getattr(interrupt, "signal", signal.SIGINT)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within: SIGTERM raises KeyboardInterrupt, as Ctrl-C's SIGINT does (pytest's own
    interruption, in a session), so that what is being written is undone by the finally
    clauses it passes through (a temporary file removed, an append cut off) rather than the
    process dying mid-write. Only where SIGTERM would end the process at once (its default
    action, in the main thread: only it gets signals); another handler keeps its plan."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        interrupted = KeyboardInterrupt(f"distbench: signal {signal.Signals(signum).name}")
        interrupted.signal = signal.Signals(signum)  # type: ignore[attr-defined]
        raise interrupted

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (POSIX) until the end of the block: its steps happen all
    or not at all, as far as an interrupt goes."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    before = mask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, before)


def append_output(path: str | os.PathLike[str], data: bytes) -> None:
    """Append ``data`` to ``path`` (created if missing): a regular file, a character device or
    a FIFO with a reader; anything else is an OSError saying what the path is.

    All or nothing in a regular file: an append that fails part way (a full disk, an
    interrupt) is cut off again, the file truncated to the size it had; where even that fails,
    the OSError says how much of the append is left in the file."""
    mode = _mode(Path(path))
    if mode is not None and not stat.S_ISREG(mode):
        _write_through(path, Path(path), mode, data)
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                 0o666)
    try:
        before = os.fstat(fd).st_size
        try:
            with sigterm_interrupts():
                _write_all(fd, data)
        except BaseException as exc:
            _cut_back(fd, before, exc)
            raise
    finally:
        os.close(fd)


def _cut_back(fd: int, size: int, cause: BaseException) -> None:
    """The file back at `size` after a failed append; an OSError saying what is left if not."""
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        try:
            left = f"{os.fstat(fd).st_size - size} bytes of it"
        except OSError:
            left = "part of it"
        reason = getattr(cause, "strerror", None) or type(cause).__name__
        raise OSError(f"{reason}; {left} left at the end of the file, cut mid-line (removing "
                      f"them failed: {exc.strerror or exc})") from None


def output_path_problem(path: str, *, directory: bool = False) -> str | None:
    """Why ``path`` cannot take an output (a file, or a ``directory`` of files), found before
    a run rather than after it: a NUL byte, a name longer than file systems take, or an
    existing entry of the wrong kind. None when nothing is wrong yet."""
    if "\0" in path:
        return "contains a NUL byte"
    for part in Path(path).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            return f"has a name of {size} bytes; file systems take at most {NAME_MAX}"
    try:
        mode = _mode(Path(os.path.realpath(path)))
    except OSError as exc:
        return exc.strerror or str(exc)
    if mode is None or stat.S_ISDIR(mode) == directory:
        return None
    if directory:
        return f"is {_kind(mode)}, not a directory"
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        return f"is {_kind(mode)}, not a file that can be written"
    return None


def _mode(path: Path) -> int | None:
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return kind
    return "not a regular file"


def _write_through(path: str | os.PathLike[str], target: Path, mode: int, data: bytes) -> None:
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        raise OSError(f"{path} is {_kind(mode)}, not a file that can be written")
    try:
        # Non-blocking: a FIFO nobody reads refuses at once (ENXIO) instead of waiting forever.
        fd = os.open(target, os.O_WRONLY | _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OSError(f"{path} is a FIFO that nobody reads") from None
        raise
    try:
        os.set_blocking(fd, True)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _exists_error(path: str | os.PathLike[str]) -> ResultsFileExistsError:
    return ResultsFileExistsError(
        path, "already exists; refusing to overwrite it (ask for overwriting to replace it)"
    )


def _create_temp(directory: Path, name: str) -> tuple[Path, int]:
    # os.open with mode 0o666 lets the umask decide permissions, like any ordinary file;
    # tempfile.mkstemp would leave a 0600 baseline that teammates cannot read.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        # Cut so that the temporary name fits wherever the target's own name does.
        tmp = directory / f".{name[:NAME_MAX - 64]}.{secrets.token_hex(6)}.tmp"
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue


def _publish_no_clobber(tmp: Path, target: Path) -> None:
    # link() fails if the target exists, closing the race between our exists() check and a
    # concurrent writer; fall back to check-then-replace where hard links are unsupported.
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise
    except OSError:
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "already exists", str(target)) from None
        os.replace(tmp, target)
        return
    tmp.unlink()


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; not possible (nor needed) everywhere.
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _dumps(value: Any, indent: int = 0) -> str:
    """Indented JSON, except that lists of numbers stay on one line.

    Baselines are committed; one sample list per line keeps files small and diffs readable.
    """
    pad = "  " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"keys must be strings, not {type(key).__name__}")
            items.append(f"{pad}{json.dumps(key)}: {_dumps(item, indent + 1)}")
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        if all(is_number(v) for v in value):
            return json.dumps(list(value), allow_nan=False, separators=(", ", ": "))
        items = [pad + _dumps(item, indent + 1) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * indent + "]"
    return json.dumps(value, allow_nan=False)


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a results file, or nccl-tests' JSON as one (nccl_tests.py); any
    problem is a ResultsFileError naming file and field."""
    raw = _read_bounded(path)
    problem = parse_problem(raw, MAX_RESULTS_VALUES, MAX_RESULTS_BYTES, "a results file")
    if problem:
        raise ResultsFileError(path, f"{problem} (docs/results-schema.md); not parsed")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ResultsFileError(
            path, f"not a pytest-distbench results file (not UTF-8 text, byte {exc.start})"
        ) from None
    raw = b""  # the text is what is parsed: not both held while it is

    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(
            path, f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except _NonFinite as exc:
        raise ResultsFileError(path, f"not valid JSON for a results file: {exc}") from None
    except RecursionError:
        raise ResultsFileError(
            path, "not a pytest-distbench results file (nested too deeply)"
        ) from None
    except ValueError as exc:  # e.g. integers with more digits than Python agrees to parse
        raise ResultsFileError(path, f"not valid JSON for a results file: {exc}") from None

    if nccl_tests.is_nccl_tests(doc):  # nccl-tests' own -J output: its figures as records
        try:
            return nccl_tests.as_document(doc, path)
        except nccl_tests.NcclTestsError as exc:
            raise ResultsFileError(path, f"nccl-tests JSON: {exc.message}", exc.field) from None
    try:
        validate_document(doc)
    except SchemaError as exc:
        raise ResultsFileError(path, exc.message, exc.field or None) from None
    return upgraded(doc)


def _read_bounded(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a results file: a regular file of at most MAX_RESULTS_BYTES."""
    try:
        return read_regular_file(path, MAX_RESULTS_BYTES, "a results file",
                                 limit_doc="docs/results-schema.md")
    except UnreadableFile as exc:
        raise ResultsFileError(path, str(exc)) from None


class UnreadableFile(Exception):
    """A file refused by read_regular_file; str() says why, without the path."""


def read_regular_file(path: str | os.PathLike[str], limit: int, what: str, *,
                      within: str | os.PathLike[str] | None = None,
                      limit_doc: str | None = None) -> bytes:
    """The bytes of the regular file `path`, of at most `limit` bytes, read without waiting:
    a FIFO, a device or a directory is refused unread (`what` names what the file should
    be: "is a FIFO, not a results file"), so is a larger file, and with `within`, a path
    that leads (through a link) out of that directory, which is never opened (UnreadableFile
    says why). Every input read from a file someone else wrote goes through here."""
    target: str | os.PathLike[str] = path
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | _OPEN_FLAGS
    try:
        if within is not None:
            real, home = os.path.realpath(path), os.path.realpath(within)
            if os.path.commonpath([real, home]) != home:
                raise UnreadableFile(f"a link leading out of {within}; not read")
            # The path checked is the path opened: a link put in its place meanwhile is
            # refused rather than followed.
            target, flags = real, flags | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(target, flags)
    except FileNotFoundError:
        raise UnreadableFile("no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise UnreadableFile(f"cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(f"is {_kind(st.st_mode)}, not {what}")
        too_large = UnreadableFile(f"larger than {format_size(limit)}, the most {what} may be"
                                   + (f" ({limit_doc})" if limit_doc else ""))
        if st.st_size > limit:
            raise too_large
        chunks, size = [], 0
        # Read to the limit, not to st_size: the file may grow while it is read.
        while chunk := os.read(fd, min(2**24, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise too_large
        return b"".join(chunks)
    except OSError as exc:
        raise UnreadableFile(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def parse_problem(raw: bytes, max_values: int, max_text: int, what: str) -> str | None:
    """Why parsing `raw` as JSON could build more than the bounds allow, found before it
    starts (None: it cannot): more than `max_values` values, or text taking more than
    `max_text` bytes once decoded. Every value but the first follows a `[`, `{`, `,` or `:`
    (keys counted too; one inside a string as well: an upper bound), counted in C; the text
    takes 1, 2 or 4 bytes a character, as its widest character (Python's strings) says."""
    values = raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{")
    if values > max_values:
        return (f"holds more than {max_values:,} JSON values (counted by their commas, colons "
                f"and opening brackets), the most {what} may hold")
    width = 1 if raw.isascii() else 4 if _ASTRAL.search(raw) else 2 if _WIDE.search(raw) else 1
    if len(raw) * width > max_text:
        return (f"holds characters taking {width} bytes each as text: at most "
                f"{format_size(max_text // width)} of such a file is read")
    return None


# UTF-8 lead bytes of characters past U+FFFF (4 bytes a character in a Python string), and of
# characters past U+00FF (2 bytes).
_ASTRAL = re.compile(rb"[\xf0-\xf4]")
_WIDE = re.compile(rb"[\xc4-\xef]")


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"number {text[:40]} is out of range")
    return value


def resolve_baseline(name_or_path: str, baseline_dir: Path) -> Path:
    """``NAME`` means ``baseline_dir/NAME.json``; anything with a separator or .json is a path.

    Raises ValueError for a NAME outside letters, digits, '.', '_' and '-'.
    """
    separators = [os.sep] + ([os.altsep] if os.altsep else []) + ["/"]
    if name_or_path.endswith(".json") or any(sep in name_or_path for sep in separators):
        return Path(name_or_path)
    if not _BASELINE_NAME.fullmatch(name_or_path):
        raise ValueError(
            f"invalid baseline name {name_or_path!r}: use letters, digits, '.', '_' and '-' "
            "(not starting with '.' or '-'), or give a path to a .json file"
        )
    return Path(baseline_dir) / f"{name_or_path}.json"
