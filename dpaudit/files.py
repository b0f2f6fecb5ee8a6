"""Durable file writes shared by the signing key, the store id, the trust store and the transparency log.

Two patterns, both crash-safe on POSIX file systems:

* :func:`create_once`: write a new file aside, ``fsync`` it, then hard-link it into place, so the file appears
  whole or not at all and two processes racing to create it end up sharing the first one's content;
* :func:`atomic_replace`: write aside, ``fsync``, ``os.replace`` over the old file, ``fsync`` the folder, so a
  reader sees the old or the new content, never a mixture.
"""

from __future__ import annotations

import os
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
