"""Renderers of the report model: text (terminal), Markdown, JSON and a self-contained HTML page."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpaudit import store as run_store
from dpaudit.files import atomic_replace
from dpaudit.report.model import build_report


def _claim_line(report: dict[str, Any]) -> str:
    cert = report["certificate"]
    if cert is None:
        return "certificate: none yet (session still open or did not close)"
    c = cert["claim"]
    cond = " — CONDITIONAL on the assumptions below" if cert["conditional"] else ""
    return (f"claim: epsilon = {c['epsilon']:.6g} at delta = {c['delta']:.3g} ({c['accountant']} accountant, "
            f"attained by {c['attained_by']}){cond}; {cert['release_status']}")


def _rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["plugin", "mechanism", "charges", "releases", "sum of declared ε"]
    rows = [[g["plugin"], g["mechanism"], str(g["charges"]), str(g["releases"]),
             "n/a (no per-event ε)" if g["declared_epsilon"] is None else f"{g['declared_epsilon']:.4g}"]
            for g in report["groups"]]
    return head, rows


def _event_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["seq", "plugin", "mechanism", "label", "parameters", "sensitivity", "filter bound ε"]
    rows = []
    for e in report["events"]:
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in e["parameters"].items())
        s = e["sensitivity"]
        rows.append([str(e["seq"]), e["plugin"], e["mechanism"], e["label"], params,
                     f"{s['value']:.4g} ({s['norm']}, {s['formula']})", f"{e['epsilon_spent']:.6g}"])
    return head, rows


FILTER_NOTE = ("'filter bound ε' is the budget filter's upper bound on the composed ε after each charge (the fastest "
               "sound accountant that admitted it, often RDP); the claim above is the session's accountant on all "
               "charges, which is never larger.")


def _facts(report: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's fixed facts, shown first by every format."""
    return [("budget", f"epsilon = {report['budget']['epsilon']:g}, delta = {report['budget']['delta']:g}"),
            ("neighbouring relation", report["neighbouring"].replace("_", "/")),
            ("protected data", ", ".join(report["protected"])),
            ("public data", ", ".join(report["public"]) or "none"),
            ("signing key", f"{report['signing_key_fingerprint']} (fingerprint: SHA-256 of the raw Ed25519 public "
             "key; compare it with the one published out of band)" if report["signing_key_fingerprint"]
             else "none recorded")]


def render_text(report: dict[str, Any]) -> str:
    lines = [f"dpaudit budget report: {report['run']['name']}",
             *(f"{name}: {value}" for name, value in _facts(report)), _claim_line(report), ""]
    for title, (head, rows) in (("By plugin and mechanism", _rows(report)), ("Events", _event_rows(report))):
        lines.append(title)
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)
        lines.append("")
    lines += [FILTER_NOTE, "", "Assumptions"]
    for a in report["assumptions"]:
        lines.append(f"  [{'conditional' if a['conditional'] else 'enforced'}] {a['id']}: {a['statement']}")
    return "\n".join(lines) + "\n"


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in esc])


def render_markdown(report: dict[str, Any]) -> str:
    parts = [f"# dpaudit budget report: {report['run']['name']}", "",
             *(f"- {name.capitalize()}: {value}" for name, value in _facts(report)),
             f"- {_claim_line(report)}", "", "## By plugin and mechanism", "", _md_table(*_rows(report)), "",
             "## Events", "", FILTER_NOTE, "",
             _md_table(*_event_rows(report)), "", "## Assumptions", ""]
    parts += [f"- **{a['id']}** ({'conditional' if a['conditional'] else 'enforced'}): {a['statement']}"
              for a in report["assumptions"]]
    if report["certificate"]:
        parts += ["", "## Certificate", "", "```json", json.dumps(report["certificate"], indent=2), "```"]
    return "\n".join(parts) + "\n"


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def render_html(report: dict[str, Any]) -> str:
    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"

    points = report["cumulative_epsilon"]
    budget = report["budget"]["epsilon"]
    width, height = 600, 160
    n = max(len(points) - 1, 1)
    poly = " ".join(f"{i / n * width:.1f},{height - min(p['epsilon'] / budget, 1.0) * height:.1f}"
                    for i, p in enumerate(points))
    claim = report["certificate"]["claim"]["epsilon"] if report["certificate"] else None
    claim_line = ("" if claim is None else
                  f'<line x1="0" x2="{width}" y1="{height - min(claim / budget, 1.0) * height:.1f}" '
                  f'y2="{height - min(claim / budget, 1.0) * height:.1f}" stroke="#36c" stroke-dasharray="6,4"/>')
    chart = (f'<svg width="{width}" height="{height}" style="border:1px solid #999">{claim_line}'
             f'<polyline fill="none" stroke="#c33" stroke-width="2" points="{poly}"/></svg>'
             f"<p>Red: {html.escape(FILTER_NOTE)} Dashed blue: the certified claim. Top edge: budget ε = "
             f"{budget:g}.</p>")
    facts = "".join(f"<li>{html.escape(name)}: {html.escape(value)}</li>" for name, value in _facts(report))
    assumptions = "".join(f"<li><b>{html.escape(a['id'])}</b> ({'conditional' if a['conditional'] else 'enforced'})"
                          f": {html.escape(a['statement'])}</li>" for a in report["assumptions"])
    cert = html.escape(json.dumps(report["certificate"], indent=2)) if report["certificate"] else "none"
    return ("<!doctype html><html><head><meta charset='utf-8'><title>dpaudit report</title><style>"
            "body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:3px 6px}"
            "table{border-collapse:collapse}</style></head><body>"
            f"<h1>dpaudit budget report: {html.escape(report['run']['name'])}</h1>"
            f"<ul>{facts}</ul><p>{html.escape(_claim_line(report))}</p>{chart}"
            f"<h2>By plugin and mechanism</h2>{table(*_rows(report))}"
            f"<h2>Events</h2>{table(*_event_rows(report))}<h2>Assumptions</h2><ul>{assumptions}</ul>"
            f"<h2>Certificate</h2><pre>{cert}</pre></body></html>\n")


FORMATS: dict[str, Callable[[dict[str, Any]], str]] = {
    "text": render_text, "markdown": render_markdown, "json": render_json, "html": render_html,
}


#: the report files a run folder (and its evidence bundle) carries, each with its renderer; ``dpaudit verify``
#: regenerates each from the ledger and certificate and compares it byte for byte
REPORT_FILES: dict[str, Callable[[dict[str, Any]], str]] = {
    run_store.REPORT_MD: render_markdown, run_store.REPORT_JSON: render_json,
}


def render(run_dir: Path, fmt: str = "text") -> str:
    """Render the report of ``run_dir`` in ``fmt`` (text, markdown, json or html)."""
    return FORMATS[fmt](build_report(run_dir))


def write_reports(run_dir: Path) -> list[str]:
    """Write ``report.md`` and ``report.json`` into the run folder where missing or different (done when a session
    closes, and by ``dpaudit recover``), each atomically: a crash leaves the old file or the new one.

    Returns:
        The names of the files written.
    """
    report = build_report(run_dir)
    written = []
    for name, render_file in REPORT_FILES.items():
        path, data = Path(run_dir) / name, render_file(report).encode("utf-8")
        if not path.is_file() or path.read_bytes() != data:
            atomic_replace(path, data)
            written.append(name)
    return written
