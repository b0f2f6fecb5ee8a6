"""Where a run's code came from: package version and, when running from a checkout, the git commit."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path


@lru_cache(maxsize=1)
def dpaudit_version() -> str:
    """Installed version of the dpaudit distribution."""
    try:
        return metadata.version("dpaudit")
    except metadata.PackageNotFoundError:
        return "unknown"


@lru_cache(maxsize=1)
def code_version() -> str:
    """``git:<commit>[+dirty]`` when dpaudit runs from a git checkout, else ``dpaudit-<version>``."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"dpaudit-{dpaudit_version()}"
    return f"git:{commit}{'+dirty' if dirty else ''}"


def package_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of the named distributions ("not installed" for a missing one)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
