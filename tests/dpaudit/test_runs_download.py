"""A run fetched from MLflow is downloaded to a temporary folder that does not outlive the process."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_download_folder_is_removed_when_the_process_exits(make_session, tmp_path) -> None:
    s = make_session(mirror=True, name="remote")
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.close()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    script = ("import sys; from dpaudit.runs import resolve_run; "
              "folder = resolve_run(sys.argv[1], store=sys.argv[2]); "
              "assert (folder / 'ledger.jsonl').is_file(); print(folder)")
    done = subprocess.run([sys.executable, "-c", script, s.run_id, str(tmp_path / "elsewhere")],
                          env={**os.environ, "TMPDIR": str(temporary)}, capture_output=True, text=True, check=True)
    assert done.stdout.startswith(str(temporary))  # it was downloaded there
    assert list(temporary.iterdir()) == []  # and removed at exit
