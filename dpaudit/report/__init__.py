"""Budget reports of a run: events grouped by plugin and mechanism, cumulative ε, assumptions, certificate."""

from dpaudit.report.model import build_report, load_run
from dpaudit.report.render import FORMATS, render, write_reports

__all__ = ["FORMATS", "build_report", "load_run", "render", "write_reports"]
