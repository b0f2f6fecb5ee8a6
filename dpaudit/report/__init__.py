"""Budget reports of a run: events grouped by plugin and mechanism, cumulative ε, assumptions, certificate."""

from dpaudit.report.model import build_report, load_run, report_from
from dpaudit.report.render import FORMATS, REPORT_FILES, render, write_reports

__all__ = ["FORMATS", "REPORT_FILES", "build_report", "load_run", "render", "report_from", "write_reports"]
