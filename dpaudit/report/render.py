"""Renderers of the report model: text (terminal), Markdown, JSON and a self-contained printable HTML page.

Every format renders the same document (:func:`document`): a list of blocks built from the model once, so the
formats differ only in syntax. Order: the plain-language summary (did the run finish, what is protected and at what
unit, what was released, what is guaranteed, on what it is conditional, what it cost), the cost by component, the
run's facts, then the details (released values, events and burn-down, assumptions, the certificate as a table) and
a glossary. JSON is the model itself. HTML adds the burn-down chart (:mod:`dpaudit.report.chart`).
"""

from __future__ import annotations

import html
import json
import secrets
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

from dpaudit import canonical
from dpaudit import store as run_store
from dpaudit.display import COMPONENT_DIGITS, plural, show, show_delta
from dpaudit.files import atomic_replace
from dpaudit.report.chart import burn_down_svg
from dpaudit.report.model import build_report
from dpaudit.report.wording import COMPOSITION_NOTE, compact, released_value

FILTER_NOTE = ("'filter bound ε' is the budget filter's upper bound on the composed ε after each charge (the fastest "
               "sound accountant that admitted it, often RDP); the certified claim is the session's accountant on all "
               "charges, which is never larger.")


@dataclass(frozen=True)
class Heading:
    """A section title."""

    text: str


@dataclass(frozen=True)
class Question:
    """A question of the summary and its answer, one line per statement."""

    title: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Paragraph:
    """Running text."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """Named values (run facts, certificate fields, glossary)."""

    pairs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Table:
    """A table with a header row."""

    head: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Chart:
    """The burn-down chart (drawn by the HTML renderer; its numbers are the events table's last column)."""

    bounds: tuple[float, ...]
    budget: float
    claim: float | None
    delta: float


Block = Heading | Question | Paragraph | Pairs | Table | Chart


def _facts(report: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return (("budget", f"ε = {show_delta(report['budget']['epsilon'])}, δ = {show_delta(report['budget']['delta'])}"),
            ("neighbouring relation", report["neighbouring"].replace("_", "/")),
            ("protected data", ", ".join(report["protected"])),
            ("public data", ", ".join(report["public"]) or "none"),
            # not the folder: report.md must not depend on where it was written (verify regenerates it elsewhere)
            ("ledger", f"{plural(report['run']['records'], 'record')}, "
             + (f"closed with status {report['status']['close']}" if report["status"]["close"] else "not closed")),
            ("signing key", f"{report['signing_key_fingerprint']} (fingerprint: SHA-256 of the raw Ed25519 public "
             "key; compare it with the one published out of band)" if report["signing_key_fingerprint"]
             else "none recorded"))


def _cost_table(report: dict[str, Any]) -> Table:
    rows = [(f"{g['plugin']} / {g['mechanism']}", str(g["charges"]), str(g["releases"]),
             show(g["epsilon_alone"], COMPONENT_DIGITS) if g["note"] is None else g["note"], g["attained_by"] or "")
            for g in report["groups"]]
    cert = report["certificate"]
    rows.append(("all charges together (certified)", str(len(report["events"])), str(len(report["released"])),
                 "none yet (no certificate)" if cert is None else show(cert["claim"]["epsilon"]),
                 "" if cert is None else cert["claim"]["attained_by"]))
    return Table(("component (plugin / mechanism)", "charges", "releases",
                  f"ε at δ = {show_delta(report['budget']['delta'])}", "attained by"), tuple(rows))


def _event_table(report: dict[str, Any]) -> Table:
    rows = []
    shown: dict[int, str] = {}  # by object: the model shares one description among equal charges
    for number, e in enumerate(report["events"], start=1):
        # parameters and the sensitivity exactly (a rounded ε or δ parameter could read below the charged one)
        params, s = e["parameters"], e["sensitivity"]
        if id(params) not in shown:  # ``report`` keeps every description alive: no id is reused meanwhile
            shown[id(params)] = ", ".join(f"{k}={show_delta(v)}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in params.items())
        if id(s) not in shown:
            shown[id(s)] = f"{show_delta(s['value'])} ({s['norm']}, {s['formula']})"
        rows.append((str(number), str(e["seq"]), f"{e['plugin']} / {e['mechanism']}", e["label"], shown[id(params)],
                     shown[id(s)], show(e["epsilon_spent"])))
    return Table(("charge", "seq", "plugin / mechanism", "label", "parameters", "sensitivity", "filter bound ε"),
                 tuple(rows))


def certificate_rows(cert: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """The certificate's fields as (dotted name, value) rows; assumptions by id (their statements are listed apart)."""
    rows: list[tuple[str, str]] = []
    for key in sorted(cert):
        value, name = cert[key], prefix + key
        if key == "assumptions" and not prefix:
            rows.append((name, "; ".join(f"{a['id']} ({'conditional' if a['conditional'] else 'enforced'}; "
                                         f"{plural(len(a['charges']), 'charge')}: {', '.join(map(str, a['charges']))})"
                                         for a in value)))
        elif isinstance(value, Mapping) and value:
            rows += certificate_rows(value, name + ".")
        elif isinstance(value, str):
            rows.append((name, value))
        else:
            rows.append((name, compact(value)))
    return rows


def document(report: dict[str, Any]) -> list[Block]:
    """The report as format-neutral blocks, in reading order."""
    blocks: list[Block] = [Heading("Summary for a reviewer")]
    blocks += [Question(s["question"], tuple(s["statements"])) for s in report["summary"]]
    blocks += [Heading(f"What each part cost (ε at δ = {show_delta(report['budget']['delta'])})"),
               _cost_table(report), Paragraph(COMPOSITION_NOTE), Heading("Run facts"), Pairs(_facts(report)),
               Heading("Released values")]
    if report["released"]:
        blocks += [Paragraph("Every noisy output, in ledger order; the charge it belongs to (its seq) is described "
                             "under Events."),
                   Table(("seq", "charge seq", "plugin / mechanism", "value"),
                         tuple((str(r["seq"]), str(r["charge_seq"]), f"{r['plugin']} / {r['mechanism']}",
                                _released_cell(r)) for r in report["released"]))]
    else:
        blocks.append(Paragraph("None: the ledger holds no release record."))
    cert = report["certificate"]
    blocks += [Heading("Events and budget burn-down"),
               Chart(tuple(e["epsilon_spent"] for e in report["events"]), report["budget"]["epsilon"],
                     None if cert is None else cert["claim"]["epsilon"], report["budget"]["delta"]),
               Paragraph(FILTER_NOTE), _event_table(report), Heading("Assumptions")]
    blocks.append(Pairs(tuple((f"{a['id']} ({'conditional' if a['conditional'] else 'enforced'})", a["statement"])
                              for a in report["assumptions"]))
                  if report["assumptions"] else Paragraph("None listed: the run has no certificate yet."))
    blocks += [Heading("Certificate"),
               Pairs(tuple(certificate_rows(cert))) if cert else Paragraph("None yet: the session did not close."),
               Heading("Glossary"), Pairs(tuple((g["term"], g["meaning"]) for g in report["glossary"]))]
    return blocks


def _released_cell(release: Mapping[str, Any]) -> str:
    """:func:`~dpaudit.report.wording.released_value` of ``release``, the same text: a value of type float (finite)
    or int without a file is written as json writes it, its ``repr``, without a call of the encoder (10⁵ released
    counts); any other release as :func:`released_value` writes it."""
    value = release["value"]
    if release["file"] is None and (type(value) is float or type(value) is int):
        text = repr(value)
        if text not in _NOT_FINITE:
            return text
    return released_value(release)


def _title(report: dict[str, Any]) -> str:
    return f"dpaudit report: {report['run']['name']}"


def _text_table(table: Table) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in table.rows)) if table.rows else len(h)
              for i, h in enumerate(table.head)]
    return (["  ".join(h.ljust(w) for h, w in zip(table.head, widths, strict=True)).rstrip()]
            + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table.rows])


def render_text(report: dict[str, Any]) -> str:
    """The report for a terminal (paragraphs wrapped at 110 columns; tables as wide as their cells)."""
    def wrap(text: str, indent: str = "") -> list[str]:
        return textwrap.wrap(text, 110, initial_indent=indent, subsequent_indent=indent + "  ") or [indent]

    lines = [_title(report), "=" * len(_title(report))]
    for block in document(report):
        if isinstance(block, Heading):
            lines += ["", block.text, "-" * len(block.text)]
        elif isinstance(block, Question):
            lines.append(block.title)
            for line in block.lines:
                lines += wrap(line, "  ")
        elif isinstance(block, Paragraph):
            lines += wrap(block.text)
        elif isinstance(block, Pairs):
            for name, value in block.pairs:
                lines += wrap(f"{name}: {value}", "  ")
        elif isinstance(block, Table):
            lines += _text_table(block)
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_rows(rows: tuple[tuple[str, ...], ...]) -> list[str]:
    """``"| " + " | ".join(_md(c) for c in row) + " |"`` for each row, escaped in one pass over the whole table:
    :func:`_md` replaces single characters, so escaping the cells joined by characters it leaves alone (and that no
    cell holds) is escaping each cell (10⁵ rows in a few string operations instead of one call per cell)."""
    joined = "\x01".join("\x00".join(r) for r in rows)
    if joined.count("\x00") != sum(len(r) - 1 for r in rows) or joined.count("\x01") != max(len(rows) - 1, 0):
        return ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows]  # a cell holds a separator
    return [f"| {row.replace(chr(0), ' | ')} |" for row in _md(joined).split("\x01")] if rows else []


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (the ``report.md`` a run folder and its bundle carry)."""
    return "\n\n".join(_markdown_parts(report)) + "\n"


def _markdown_utf8(report: dict[str, Any]) -> bytes:
    """``render_markdown(report).encode("utf-8")``, the same bytes (:func:`_utf8_joined`)."""
    return _utf8_joined(_interleaved(_markdown_parts(report), "\n\n") + ["\n"])


def _markdown_parts(report: dict[str, Any]) -> list[str]:
    """The Markdown of each block, in order (joined by blank lines)."""
    parts = [f"# {_md(_title(report))}"]
    for block in document(report):
        if isinstance(block, Heading):
            parts.append(f"## {block.text}")
        elif isinstance(block, Question):
            parts.append(f"**{block.title}**\n\n" + "\n".join(f"- {_md(line)}" for line in block.lines))
        elif isinstance(block, Paragraph):
            parts.append(_md(block.text))
        elif isinstance(block, Pairs):
            parts.append("\n".join(f"- **{_md(name)}**: {_md(value)}" for name, value in block.pairs))
        elif isinstance(block, Table):
            parts.append("\n".join(["| " + " | ".join(block.head) + " |", "|" + "---|" * len(block.head)]
                                   + _md_rows(block.rows)))
    return parts


def _interleaved(parts: list[str], separator: str) -> list[str]:
    """``parts`` with ``separator`` between each two (their ``separator.join``, not yet joined)."""
    out = [separator] * (2 * len(parts) - 1) if parts else []
    out[::2] = parts
    return out


def _utf8_joined(pieces: list[str]) -> bytes:
    """``"".join(pieces).encode("utf-8")``, the same bytes, each piece encoded alone: a Python string holding one
    character beyond Latin-1 (the reports' ε) stores every character in two bytes, so joining the per-record lines,
    which are ASCII, with such a piece would first widen tens of megabytes (10⁵ records) and then narrow them back
    to UTF-8; the UTF-8 of a concatenation is the concatenation of the parts' UTF-8."""
    return b"".join([piece.encode("utf-8") for piece in pieces])


#: the model's keys a reader of ``report.json`` meets first (the rest follow in sorted order)
JSON_FIRST = ("summary", "status", "groups")
#: the model's per-record lists: one item per line (compact, and encoded by json's C encoder: 10^5 records stay cheap)
JSON_ONE_PER_LINE = ("events", "released", "cumulative_epsilon", "info")


#: ``json.dumps(item, sort_keys=True, ensure_ascii=False)``, built once (dumps builds an encoder per call)
_encode_item = canonical.acyclic_encode(json.JSONEncoder(sort_keys=True, ensure_ascii=False))
#: ``json.dumps(text, ensure_ascii=False)`` of a string: the string encoder of :data:`_encode_item`
_encode_string = canonical.encode_string


#: an event item's members (:func:`dpaudit.report.model.report_from`), those that differ between the charges of one
#: description (the slots of :func:`_encode_events`' templates), the strings and multiplicity that key a template by
#: value, the description's objects that key it by identity, and every member whose exact type a template needs
_EVENT_KEYS = ("seq", "time", "plugin", "mechanism", "epsilon_spent", "bound_source", "kind", "label", "parameters",
               "multiplicity", "sensitivity", "assumptions", "releases")
_EVENT_SLOTS = ("seq", "time", "epsilon_spent", "releases")
_event_strings = itemgetter("plugin", "mechanism", "bound_source", "kind", "label", "multiplicity")
_event_objects = itemgetter("parameters", "sensitivity", "assumptions")
_event_typed = itemgetter("plugin", "mechanism", "bound_source", "kind", "label", "multiplicity", "seq", "releases",
                          "time", "epsilon_spent")
_NOT_FINITE = frozenset({"inf", "-inf", "nan"})
_MARKER = "\x00dpaudit-report-slot-" + secrets.token_hex(8) + "-"
_ABSENT = object()  # (a template may be None: the item is encoded whole)


def _event_template(event: dict[str, Any]) -> str | None:
    """The %-template of ``event``'s encoding with its slots left open, each as ``%(name)r`` (filled from the item
    itself), or None where a slot's marker does not occur exactly once in that encoding."""
    markers = {name: _MARKER + str(i) for i, name in enumerate(_EVENT_SLOTS)}
    text = _encode_item({**event, **markers})
    quoted = {name: _encode_item(m) for name, m in markers.items()}
    if any(text.count(q) != 1 for q in quoted.values()):
        return None
    template = text.replace("%", "%%")
    for name, q in quoted.items():
        template = template.replace(q, f"%({name})r")
    return template


def _encode_events(events: list[Any]) -> list[str]:
    """``[_encode_item(e) for e in events]``, the same texts, with one template per event shape.

    The charges of one description share its objects (``parameters``, ``sensitivity``, ``assumptions``:
    :func:`dpaudit.report.model.report_from`), which the C encoder would re-sort and re-encode (their floats' ``repr``
    above all) for every item. An item is templated when it has exactly :data:`_EVENT_KEYS`, its five strings are of
    type str, its multiplicity, ``seq`` and ``releases`` of type int, and its ``time`` and ``epsilon_spent`` finite
    numbers of type int or float: then it is keyed by its strings and multiplicity (by value: their types are fixed)
    and its description objects by identity (``events`` keeps them alive, so no id is reused meanwhile). Items of one
    key encode alike but for their :data:`_EVENT_SLOTS`, numbers whose text json writes as ``int.__repr__`` /
    ``float.__repr__`` (``%r`` of the item's own member), whose markers were found once each in the template. Any
    other item is encoded whole.
    """
    templates: dict[tuple[Any, ...], str | None] = {}
    out = []
    for event in events:
        template = None
        if type(event) is dict and tuple(event) == _EVENT_KEYS:
            plugin, mechanism, source, kind, label, multiplicity, seq, releases, time, spent = _event_typed(event)
            # exact types (a bool is no int here), and an int or a finite float less itself is 0 (false), while
            # infinity or NaN less itself is NaN (true)
            if type(plugin) is str and type(mechanism) is str and type(source) is str and type(kind) is str \
                    and type(label) is str and type(multiplicity) is int and type(seq) is int \
                    and type(releases) is int and (type(time) is float or type(time) is int) \
                    and (type(spent) is float or type(spent) is int) and not (time - time or spent - spent):
                key = (_event_strings(event), *map(id, _event_objects(event)))
                template = templates.get(key, _ABSENT)
                if template is _ABSENT:
                    template = templates[key] = _event_template(event)
        out.append(_encode_item(event) if template is None else template % event)
    return out


def _encode_cumulative(items: list[Any]) -> list[str]:
    """``[_encode_item(i) for i in items]`` for the ``cumulative_epsilon`` list, the same texts: an item that is
    exactly ``{"seq": int, "epsilon": float}`` (what the model builds) is written in json's sorted form with its two
    numbers as ``repr``, json's own text of an exact int and of a finite float; any other item is encoded by json."""
    out = []
    for item in items:
        if type(item) is dict and len(item) == 2:
            seq, epsilon = item.get("seq"), item.get("epsilon")
            if type(seq) is int and type(epsilon) is float:
                text = repr(epsilon)
                if text not in _NOT_FINITE:
                    out.append(f'{{"epsilon": {text}, "seq": {seq!r}}}')
                    continue
        out.append(_encode_item(item))
    return out


#: a ``released`` item's keys in the model's order (:func:`dpaudit.report.model.report_from`)
_RELEASED_KEYS = ("seq", "charge_seq", "plugin", "mechanism", "label", "value", "file")


def _encode_released(items: list[Any]) -> list[str]:
    """``[_encode_item(i) for i in items]`` for the ``released`` list, the same texts: an item with exactly
    :data:`_RELEASED_KEYS`, ``seq`` and ``charge_seq`` of type int, ``plugin``, ``mechanism`` and ``label`` of type
    str, ``file`` None and a ``value`` of type int or finite float (a scalar release, what 10⁵ releases of counts
    hold) is written in json's sorted form: the numbers as ``repr`` (json's own text of an exact int and of a
    finite float), the strings by json's own string encoder; any other item is encoded by json."""
    out = []
    for item in items:
        if type(item) is dict and tuple(item) == _RELEASED_KEYS:
            seq, charge_seq, plugin, mechanism, label, value, file = item.values()
            if type(seq) is int and type(charge_seq) is int and type(plugin) is str and type(mechanism) is str \
                    and type(label) is str and file is None and (type(value) is float or type(value) is int):
                text = repr(value)
                if text not in _NOT_FINITE:
                    out.append(f'{{"charge_seq": {charge_seq!r}, "file": null, "label": {_encode_string(label)}, '
                               f'"mechanism": {_encode_string(mechanism)}, "plugin": {_encode_string(plugin)}, '
                               f'"seq": {seq!r}, "value": {text}}}')
                    continue
        out.append(_encode_item(item))
    return out


#: the per-record lists with an encoder of their own (the same texts as :func:`_encode_item`'s)
_LIST_ENCODERS: dict[str, Callable[[list[Any]], list[str]]] = {
    "events": _encode_events, "cumulative_epsilon": _encode_cumulative, "released": _encode_released,
}


def _json_value(key: str, value: Any) -> list[str]:
    """The text of ``report[key]`` in ``report.json``, in pieces (a per-record list's items apart from its brackets:
    10⁵ records make tens of megabytes, which each concatenation would copy)."""
    if key in JSON_ONE_PER_LINE and value:
        encode = _LIST_ENCODERS.get(key)
        items = map(_encode_item, value) if encode is None else encode(value)
        return ["[\n    ", ",\n    ".join(items), "\n  ]"]
    return [_indented(value, "  ")]


#: the types whose text :data:`_encode_item` writes as json's indenting encoder does (no nesting to indent)
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _indented(value: Any, pad: str) -> str:
    """``json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).replace("\n", "\n" + pad)``, the same text,
    with json's C encoder writing each scalar: json's indenting encoder is its pure-Python one, which a certificate's
    assumptions (10⁵ charge numbers, each on a line) made a tenth of the report's cost. A list or a dict with string
    keys is laid out as json lays it out (``[`` or ``{``, each item on a line indented two more, items separated by
    ``,``, keys sorted and followed by ``: ``, the closing bracket on a line at ``pad``; ``[]`` and ``{}`` when
    empty); any other value (a tuple, a dict with other keys, a subclass) is written by ``json.dumps`` itself. It
    recurses twice a level: the values it writes nest at most 64 levels (every reader of a ledger line or a
    certificate refuses deeper ones, and :meth:`dpaudit.ledger.Ledger.append` writes none)."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return _encode_item(value)
    inner = pad + "  "
    if kind is list:
        if not value:
            return "[]"
        items = [_encode_item(v) if type(v) in _JSON_SCALARS else _indented(v, inner) for v in value]
        return "[\n" + inner + (",\n" + inner).join(items) + "\n" + pad + "]"
    if kind is dict and all(type(k) is str for k in value):
        if not value:
            return "{}"
        members = [f"{_encode_string(k)}: {_encode_item(v) if type(v) in _JSON_SCALARS else _indented(v, inner)}"
                   for k, v in sorted(value.items())]
        return "{\n" + inner + (",\n" + inner).join(members) + "\n" + pad + "}"
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).replace("\n", "\n" + pad)


def render_json(report: dict[str, Any]) -> str:
    """The model itself, UTF-8 (no ``\\u`` escapes): :data:`JSON_FIRST` first, then every other key sorted; nested
    keys sorted (the bytes do not depend on the order of the certificate file's keys); the per-record lists one
    item per line, everything else indented."""
    return "".join(_json_pieces(report))


def _json_utf8(report: dict[str, Any]) -> bytes:
    """``render_json(report).encode("utf-8")``, the same bytes (:func:`_utf8_joined`)."""
    return _utf8_joined(_json_pieces(report))


def _json_pieces(report: dict[str, Any]) -> list[str]:
    """:func:`render_json`'s text in pieces (each key's value apart, not yet joined)."""
    keys = [*JSON_FIRST, *sorted(k for k in report if k not in JSON_FIRST)]
    pieces = ["{\n"]
    for i, k in enumerate(keys):
        pieces += [(",\n" if i else "") + f"  {json.dumps(k)}: ", *_json_value(k, report[k])]
    return pieces + ["\n}\n"]


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;line-height:1.45;max-width:1100px;
margin:1.5em auto;padding:0 1em;overflow-wrap:anywhere}
h1{font-size:1.6em;margin-bottom:.3em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:1.6em}
.summary{border:2px solid #2e7d32;border-radius:6px;padding:.2em 1em .6em;background:#f4faf4}
.summary.not-releasable{border-color:#c0392b;background:#fdf1f0}
.q h3{font-size:1em;margin:.8em 0 .2em}.q ul{margin:.2em 0}
table{border-collapse:collapse;width:100%;margin:.5em 0 1em;font-size:.9em}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f1f1f1;overflow-wrap:normal}tr.total td{font-weight:bold;background:#f7f7f7}
dl{margin:.4em 0}dt{font-weight:bold;margin-top:.4em;overflow-wrap:anywhere}
dd{margin:0 0 0 1.5em;overflow-wrap:anywhere}
svg.chart{max-width:100%;height:auto}svg.chart text{font-size:13px;font-family:sans-serif;fill:#222}
@media print{body{max-width:none;margin:0;padding:0;font-size:10pt}h2{break-after:avoid}
tr,.q,svg.chart,dd{break-inside:avoid}table{font-size:8pt}.summary{background:none}}
@page{margin:1.5cm}
"""


def _html_table(table: Table, total_last: bool = False) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in table.head)
    rows = []
    for i, r in enumerate(table.rows):
        cls = ' class="total"' if total_last and i == len(table.rows) - 1 else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def render_html(report: dict[str, Any]) -> str:
    """A self-contained, printable page (no script, no external resource) with the burn-down chart."""
    cert = report["certificate"]
    claim_text = show(cert["claim"]["epsilon"]) if cert else ""
    status = "summary" if report["status"]["releasable"] else "summary not-releasable"
    body, in_summary = [f"<h1>{html.escape(_title(report))}</h1>", f'<section class="{status}">'], True
    for block in document(report):
        if isinstance(block, Heading):
            if in_summary and block.text != "Summary for a reviewer":
                body.append("</section>")
                in_summary = False
            anchor = "-".join("".join(c if c.isalnum() else " " for c in block.text.lower()).split())
            body.append(f'<h2 id="{anchor}">{html.escape(block.text)}</h2>')
        elif isinstance(block, Question):
            items = "".join(f"<li>{html.escape(line)}</li>" for line in block.lines)
            body.append(f'<div class="q"><h3>{html.escape(block.title)}</h3><ul>{items}</ul></div>')
        elif isinstance(block, Paragraph):
            body.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Pairs):
            body.append("<dl>" + "".join(f"<dt>{html.escape(n)}</dt><dd>{html.escape(v)}</dd>"
                                         for n, v in block.pairs) + "</dl>")
        elif isinstance(block, Table):
            body.append(_html_table(block, total_last=block.head[0].startswith("component")))
        elif isinstance(block, Chart):
            body.append(burn_down_svg(block.bounds, block.budget, block.claim, claim_text, show_delta(block.delta)))
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><meta name='viewport' "
            f"content='width=device-width, initial-scale=1'><title>{html.escape(_title(report))}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")


FORMATS: dict[str, Callable[[dict[str, Any]], str]] = {
    "text": render_text, "markdown": render_markdown, "json": render_json, "html": render_html,
}


#: the report files a run folder (and its evidence bundle) carries, each with its renderer to the file's bytes (the
#: UTF-8 of :func:`render_markdown` and :func:`render_json`); ``dpaudit verify`` regenerates each from the ledger and
#: certificate and compares it byte for byte
REPORT_FILES: dict[str, Callable[[dict[str, Any]], bytes]] = {
    run_store.REPORT_MD: _markdown_utf8, run_store.REPORT_JSON: _json_utf8,
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
        path, data = Path(run_dir) / name, render_file(report)
        if not path.is_file() or path.read_bytes() != data:
            atomic_replace(path, data)
            written.append(name)
    return written
