"""Large released arrays as binary sidecar files of the ledger (``<run>/outputs/<sha256>.npy``).

A released array of :data:`MIN_SIDECAR_NUMBERS` numbers or more is not written into the ledger as JSON (10⁷ floats
would be ~200 MB of text, parsed again by every verifier). :func:`write_array` saves it in numpy's ``.npy`` format,
hashing the bytes as they are written, ``fsync``\\ s the file, renames it to its SHA-256 and ``fsync``\\ s the
folder, all before the ``release`` record is appended; the record names the file by an :class:`ArrayFile` (path,
SHA-256, dtype, shape) instead of the numbers. The ledger's hash chain covers the record and so the file's hash:
an edited, swapped or truncated sidecar fails ``dpaudit verify`` (:func:`check_array_file`), and a crash before the
record leaves at most an unreferenced file of a charged release (see docs/ledger.md, "Large outputs").
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.errors import LedgerError
from dpaudit.files import fsync_dir, open_regular

OUTPUTS_DIR = "outputs"
#: released arrays with at least this many numbers go to a sidecar file
MIN_SIDECAR_NUMBERS = 4096
#: dtypes a sidecar may hold (little-endian float64 and int64: what the mechanisms release)
DTYPES = ("<f8", "<i8")
_PATH = re.compile(rf"{OUTPUTS_DIR}/([0-9a-f]{{64}})\.npy")
_BLOCK = 1 << 22
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


@dataclass(frozen=True)
class ArrayFile:
    """A released array stored beside the ledger.

    Attributes:
        path: ``outputs/<sha256>.npy``, relative to the run folder.
        sha256: SHA-256 of the whole ``.npy`` file (header and data).
        dtype: the array's dtype (one of :data:`DTYPES`).
        shape: the array's shape.
    """

    path: str
    sha256: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        """How many numbers the array holds."""
        return int(np.prod(self.shape, dtype=object))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, value: Any) -> ArrayFile:
        """Parse the ``output_file`` field of a ``release`` body.

        Raises:
            LedgerError: not an object with a path ``outputs/<sha256>.npy`` matching its ``sha256``, a dtype in
                :data:`DTYPES` and a shape of non-negative integers.
        """
        if not isinstance(value, Mapping):
            raise LedgerError("release record field 'output_file' must be a JSON object")
        path, digest, dtype, shape = (value.get(k) for k in ("path", "sha256", "dtype", "shape"))
        match = _PATH.fullmatch(path) if isinstance(path, str) else None
        if match is None or match.group(1) != digest:
            raise LedgerError(f"release output file {path!r} is not {OUTPUTS_DIR}/<its sha256>.npy")
        if dtype not in DTYPES:
            raise LedgerError(f"release output file dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise LedgerError(f"release output file shape {shape!r} is not a list of non-negative integers")
        return cls(path=path, sha256=digest, dtype=dtype, shape=tuple(shape))


def wants_sidecar(output: Any) -> bool:
    """Whether ``output`` is a numeric array large enough to be stored as a sidecar file."""
    return isinstance(output, np.ndarray) and output.dtype.str in DTYPES and output.size >= MIN_SIDECAR_NUMBERS


class _HashingFile:
    """A write-only file object that hashes what passes through it (``np.lib.format.write_array`` writes to it)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.digest = hashlib.sha256()

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        written = 0
        while written < len(view):
            written += os.write(self._fd, view[written:])
        return len(view)


def write_array(run_dir: Path, array: np.ndarray) -> ArrayFile:
    """Save ``array`` as ``<run_dir>/outputs/<sha256>.npy``, durably (file and folder ``fsync``\\ ed); describe it.

    Args:
        run_dir: the run folder (the ledger's folder).
        array: a C-ordered or other numpy array with a dtype in :data:`DTYPES`.

    Raises:
        LedgerError: the file cannot be written (the ``release`` record is then not appended).
    """
    folder = Path(run_dir) / OUTPUTS_DIR
    temporary = folder / f".writing-{os.getpid()}-{os.urandom(8).hex()}.npy"
    try:
        folder.mkdir(exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            sink = _HashingFile(fd)
            np.lib.format.write_array(sink, np.ascontiguousarray(array), allow_pickle=False)
            os.fsync(fd)
        finally:
            os.close(fd)
        digest = sink.digest.hexdigest()
        path = f"{OUTPUTS_DIR}/{digest}.npy"
        os.replace(temporary, Path(run_dir) / path)
        fsync_dir(folder)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise LedgerError(f"cannot write the released array to {folder}: {exc.strerror or exc}") from exc
    return ArrayFile(path=path, sha256=digest, dtype=array.dtype.str, shape=tuple(int(n) for n in array.shape))


def sidecar_files(run_dir: Path) -> list[str]:
    """The finished sidecar files of a run folder (``outputs/<sha256>.npy``, relative; no temporaries), sorted."""
    folder = Path(run_dir) / OUTPUTS_DIR
    if not folder.is_dir() or folder.is_symlink():
        return []
    return sorted(f"{OUTPUTS_DIR}/{p.name}" for p in folder.iterdir() if _PATH.fullmatch(f"{OUTPUTS_DIR}/{p.name}"))


def check_array_file(run_dir: Path, ref: ArrayFile) -> str | None:
    """Why the sidecar ``ref`` in ``run_dir`` does not hold what its record says (None if it does).

    The file must be a regular file (no symlink), hash to ``ref.sha256``, be a ``.npy`` of ``ref.dtype`` and
    ``ref.shape`` in C order, and hold finite numbers only.
    """
    path = Path(run_dir) / ref.path
    try:
        fd = open_regular(path, LedgerError)
    except LedgerError as exc:
        return str(exc)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as file:
        while block := file.read(_BLOCK):
            digest.update(block)
        if digest.hexdigest() != ref.sha256:
            return f"{ref.path}: SHA-256 {digest.hexdigest()} differs from the ledger's {ref.sha256}"
        file.seek(0)
        try:
            read_header = _HEADER_READERS.get(np.lib.format.read_magic(file))
            if read_header is None:
                return f"{ref.path}: not a .npy file of format version 1.0 or 2.0"
            shape, fortran, dtype = read_header(file)
        except ValueError as exc:
            return f"{ref.path}: not a .npy file ({exc})"
        if fortran or dtype.str != ref.dtype or tuple(shape) != ref.shape:
            return (f"{ref.path}: holds a {'Fortran-order ' if fortran else ''}{dtype.str} array of shape "
                    f"{tuple(shape)}, the ledger says {ref.dtype} of shape {ref.shape}")
        if ref.size == 0 or dtype.kind != "f":
            return None
        try:
            values = np.memmap(file, dtype=dtype, mode="r", offset=file.tell(), shape=(ref.size,))
        except ValueError as exc:
            return f"{ref.path}: shorter than its header says ({exc})"
        if not all(np.isfinite(values[i:i + _BLOCK]).all() for i in range(0, ref.size, _BLOCK)):
            return f"{ref.path}: holds a NaN or infinity"
    return None
