"""Durable file writes shared by the signing key, the store id, the trust store and the transparency log.

Two patterns, both crash-safe on POSIX file systems:

* :func:`create_once`: write a new file aside, ``fsync`` it, then hard-link it into place, so the file appears
  whole or not at all and two processes racing to create it end up sharing the first one's content;
* :func:`atomic_replace`: write aside, ``fsync``, ``os.replace`` over the old file, ``fsync`` the folder, so a
  reader sees the old or the new content, never a mixture.

And guarded reads for evidence: :func:`read_regular` for every evidence file ``dpaudit verify`` opens (no symlink,
no device or FIFO, never more than a fixed number of bytes) and :func:`copy_regular` for export.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """``fsync`` a folder, so a rename or link inside it survives a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_aside(path: Path, data: bytes, mode: int) -> Path:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def create_once(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """Create ``path`` holding ``data`` (and its parent folders) unless it exists.

    Returns:
        True if this call created the file, False if it already existed (its content is left untouched).

    Raises:
        OSError: the file could not be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_aside(path, data, mode)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    fsync_dir(path.parent)
    return True


def atomic_replace(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace (or create) ``path`` with ``data`` atomically and durably, with permission bits ``mode``.

    Raises:
        OSError: the file could not be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_aside(path, data, mode)
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def open_regular(path: Path, error: type[Exception]) -> int:
    """A read descriptor on ``path``, refused (``error``) unless it is a regular file reached without a symlink."""
    link = f"{path} is a symbolic link: evidence files must be regular files, not links"
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise error(link)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise error(link if exc.errno == errno.ELOOP else f"cannot read {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{path} is not a regular file (a device, FIFO or folder is not evidence)")
    return fd


def read_regular(path: Path, limit: int, error: type[Exception]) -> bytes:
    """Read at most ``limit`` bytes of evidence from ``path``, which must be a regular file and not a symlink.

    The file is opened with ``O_NOFOLLOW`` (a symlink, e.g. to ``/etc/passwd``, is refused, not followed) and
    ``O_NONBLOCK`` (opening a FIFO does not hang), checked to be a regular file with ``fstat`` on that very
    descriptor (``/dev/zero`` is refused), and read up to ``limit + 1`` bytes, so a huge or sparse file is refused
    without ever being held in memory.

    Raises:
        error: the file is missing, unreadable, a symlink, not a regular file, or longer than ``limit`` bytes;
            the message names the file and the reason.
    """
    path = Path(path)
    fd = open_regular(path, error)
    chunks, size = [], 0
    try:
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if size > limit:
        raise error(f"{path} is larger than the {limit}-byte limit for this kind of evidence")
    return b"".join(chunks)


def copy_regular(source: Path, destination: Path, error: type[Exception]) -> Path:
    """Copy the regular file ``source`` to ``destination``, following no symlink at either end.

    Raises:
        error: ``source`` is a symlink or not a regular file, ``destination`` is a symlink, or the copy failed.
    """
    source, destination = Path(source), Path(destination)
    fd = open_regular(source, error)
    try:
        with os.fdopen(fd, "rb") as src:
            out = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except OSError as exc:
        raise error(f"cannot copy {source} to {destination}: {exc.strerror or exc}") from exc
    return destination
