"""Report-test fixtures: a demo-like run (every record kind of the demo's ledger) and headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from dpaudit import Session
from tests.dpaudit.report._demo_like import run_demo_like


@pytest.fixture
def demo_like(make_session) -> Session:
    """A closed demo-like run with secure randomness (its certificate is for release)."""
    return run_demo_like(Session(epsilon=5.0, delta=1e-5, name="demo-like", protected=("adult-train",),
                                 public=("adult-test",), mirror=False))


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of a headless Chromium, installed with the OS package manager when absent and allowed.

    Skips, saying why, where it is absent and cannot be installed (not root, no apt-get, or the install failed).
    """
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    if not (shutil.which("apt-get") and Path("/etc/debian_version").exists() and os.geteuid() == 0):
        pytest.skip("headless Chromium is not installed and cannot be installed here (needs root on Debian/Ubuntu: "
                    "`apt-get install -y chromium`)")
    done = subprocess.run(["apt-get", "install", "-y", "chromium"], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, check=False)
    if done.returncode != 0 or not shutil.which("chromium"):
        pytest.skip(f"`apt-get install -y chromium` failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    return shutil.which("chromium")
