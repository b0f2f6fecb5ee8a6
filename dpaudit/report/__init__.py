"""Reports of a run a reviewer can sign off: a plain-language summary, the cost by component, then the details.

One model (:mod:`dpaudit.report.model`) from the ledger and certificate, worded by :mod:`dpaudit.report.wording`,
rendered as text, Markdown, JSON and HTML (:mod:`dpaudit.report.render`, with :mod:`dpaudit.report.chart`).
"""

from dpaudit.report.model import build_report, load_run, report_from
from dpaudit.report.render import FORMATS, REPORT_FILES, render, write_reports

__all__ = ["FORMATS", "REPORT_FILES", "build_report", "load_run", "render", "report_from", "write_reports"]
