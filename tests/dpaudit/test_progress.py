"""Progress bars: on for a terminal or when forced, off otherwise; items pass through unchanged."""

from __future__ import annotations

from dpaudit.progress import progress


def test_progress_passes_items_through_when_off(monkeypatch, capsys):
    monkeypatch.setenv("DPAUDIT_PROGRESS", "0")
    assert list(progress(range(5), "work")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""


def test_progress_draws_a_bar_when_forced(monkeypatch, capsys):
    monkeypatch.setenv("DPAUDIT_PROGRESS", "1")
    assert list(progress(range(3), "work", total=3)) == [0, 1, 2]
    assert "work" in capsys.readouterr().err
