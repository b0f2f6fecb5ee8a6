"""Every format answers a reviewer's questions first, from one model; HTML is checked by a Chromium screenshot."""

from __future__ import annotations

import html
import json
import random
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.display import show
from dpaudit.ledger import read_records
from dpaudit.report import FORMATS, build_report, render, write_reports
from dpaudit.report.wording import compact
from dpaudit.verify import verify_bundle
from tests.dpaudit.report._demo_like import MODEL_SHA256, SELECTED

QUESTIONS = ("Did the run finish?", "What is protected, and at what unit?", "What was released?",
             "What is guaranteed?", "Is the guarantee conditional?", "What did it cost?")


def _released(run_dir) -> list:
    records, _ = read_records(run_dir / "ledger.jsonl")
    return [r.body["output"] for r in records if r.type == "release"]


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json"])
def test_the_first_section_answers_what_was_released_what_it_cost_and_on_what(demo_like, fmt):
    out = " ".join(render(demo_like.run_dir, fmt).split())  # the text format wraps its paragraphs
    claim = show(demo_like.close()["claim"]["epsilon"])
    model = build_report(demo_like.run_dir)
    # the questions come first, in order, then the cost table, then the details
    found = [out.index(q) for q in QUESTIONS]
    cost = out.index('"status":') if fmt == "json" else out.index("What each part cost")  # JSON: the summary first
    details = out.index('"run":' if fmt == "json" else "Every noisy output, in ledger order")
    assert found == sorted(found) and found[-1] < cost < details
    first = out[:cost]
    assert MODEL_SHA256 in first and compact(SELECTED) in first, "model digest and hyperparameters up front"
    assert f"({claim}, 1e-05)-differential privacy" in first and "e^ε" in first
    assert "adding one record to, or removing one record from, adult-train" in first
    assert "FINISHED and for release" in first and "CONDITIONAL on" in first
    for g in model["groups"]:
        assert f"{g['plugin']} / {g['mechanism']}: ε ≤ {show(g['epsilon_alone'], 4)} alone" in first
    assert "Composition is not a sum" in first
    # every released value, with its value, somewhere in the report
    if fmt == "json":
        assert [r["value"] for r in json.loads(render(demo_like.run_dir, fmt))["released"]] == _released(
            demo_like.run_dir)
    for value in _released(demo_like.run_dir):
        assert (html.escape(compact(value)) if fmt == "html" else compact(value)) in out or fmt == "json"
    assert "\\u03b5" not in out and "\\u00b2" not in out  # no \u escapes anywhere, JSON included
    for term in ("filter bound ε", "attained by pld", "add/remove"):
        assert term in out, "the glossary explains the jargon"


def test_plurals_are_right(make_session):
    with make_session(epsilon=1.0, delta=1e-6) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1, label="one")
    text = " ".join(render(s.run_dir, "text").split())
    assert "1 noisy value from session / laplace" in text and "from 1 charge," in text
    assert "1 charges" not in text and "1 values" not in text and "1 records" not in text


@pytest.mark.parametrize("status", ["ABORTED", "FAILED", "REFUSED"])
def test_a_run_that_did_not_finish_says_not_for_release_first(make_session, status):
    s = make_session(epsilon=1.0, delta=1e-6)
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    s.close(status)
    model = build_report(s.run_dir)
    assert not model["status"]["releasable"]
    for fmt in FORMATS:
        out = " ".join(render(s.run_dir, fmt).split())
        answer = out[out.index("Did the run finish?"):out.index("What is protected")]
        assert f"NOT FOR RELEASE: the run did not finish (it closed {status})" in answer, fmt
        assert "FINISHED and for release" not in out


def test_an_unclosed_run_has_no_guarantee_and_is_not_for_release(make_session):
    s = make_session(epsilon=1.0, delta=1e-6)
    s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    text = " ".join(render(s.run_dir, "text").split())
    assert "NOT CLOSED" in text and "No certificate yet" in text and "none yet (no certificate)" in text
    assert "<svg" in render(s.run_dir, "html")  # the burn-down of a running session, without a claim line
    s.close()


def test_a_seeded_run_that_finished_is_still_not_for_release(make_session):
    with make_session(epsilon=1.0, delta=1e-6) as s:
        s.laplace(1.0, sensitivity=1.0, epsilon=0.1)
    assert "NOT FOR RELEASE: the run finished, but" in render(s.run_dir, "markdown")


def test_html_is_printable_self_contained_and_shows_the_certificate_as_a_table(demo_like):
    page = render(demo_like.run_dir, "html")
    cert = demo_like.close()
    assert page.startswith("<!doctype html>") and "<script" not in page and "http" not in page.replace(
        "http://www.w3.org/2000/svg", "")
    assert "@media print" in page and "<pre" not in page, "no raw JSON dump running off the page"
    assert f"<dt>claim.epsilon</dt><dd>{cert['claim']['epsilon']!r}</dd>" in page
    assert f"<dt>signature.value</dt><dd>{cert['signature']['value']}</dd>" in page
    assert page.count("<svg") == 1 and "charge number" in page
    assert f"certified claim ε = {show(cert['claim']['epsilon'])}" in page


def test_markdown_tables_escape_pipes(demo_like):
    md = render(demo_like.run_dir, "markdown")
    assert "DP-SGD logreg \\| selected hyperparameters" in md


def test_reports_are_deterministic_and_verify_regenerates_them(demo_like):
    """``verify`` compares report.md / report.json byte for byte with the ones it regenerates from the evidence."""
    first = {fmt: render(demo_like.run_dir, fmt) for fmt in FORMATS}
    assert first == {fmt: render(demo_like.run_dir, fmt) for fmt in FORMATS}
    assert write_reports(demo_like.run_dir) == []  # written at close, unchanged since
    checks = {c.name: c for c in verify_bundle(demo_like.run_dir).checks}
    assert checks["reports"].ok, checks["reports"].detail


def test_the_html_report_screenshot_is_not_blank(demo_like, chromium, tmp_path):
    """Headless Chromium renders the page: the PNG is not blank and the page states the certified ε."""
    image = pytest.importorskip("PIL.Image", reason="Pillow (installed with MLflow's matplotlib) reads the PNG")
    page = tmp_path / "report.html"
    page.write_text(render(demo_like.run_dir, "html"), encoding="utf-8")
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
                   capture_output=True, timeout=180, check=True)
    with image.open(shot) as png:
        assert png.size == (1200, 2000)
        counts = png.convert("L").histogram()  # pixels per grey level 0..255
    total = sum(counts)
    mean = sum(level * c for level, c in enumerate(counts)) / total
    variance = sum((level - mean) ** 2 * c for level, c in enumerate(counts)) / total
    dark = sum(counts[:128]) / total
    assert variance > 100 and 0.005 < dark < 0.5, (variance, dark)  # text on a page, not a blank or black frame
    assert show(demo_like.close()["claim"]["epsilon"]) in page.read_text(encoding="utf-8")
    # printable: at the width of an A4 page inside 1.5 cm margins (180 mm, 680 px) nothing runs off the right edge
    # (before: a 64-digit hash and unbreakable table headers did)
    narrow = tmp_path / "narrow.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={narrow}", "--window-size=680,6000", page.as_uri()],
                   capture_output=True, timeout=180, check=True)
    with image.open(narrow) as png:
        grey = png.convert("L")
        edge = grey.crop((grey.width - 6, 0, grey.width, grey.height))
        assert sum(edge.histogram()[:200]) == 0, "content runs off the right edge of a printable width"


def test_markdown_rows_escape_exactly_as_cell_by_cell():
    """The table escaped in one pass equals each cell escaped alone, also where a cell holds the pass's separators."""
    from dpaudit.report.render import _md, _md_rows

    rng = random.Random(1)
    alphabet = ["a", "|", "\\", "\n", "\x00", "\x01", "é", " "]
    for _ in range(2000):
        width = rng.randint(1, 4)
        rows = tuple(tuple("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(width))
                     for _ in range(rng.randint(0, 4)))
        assert _md_rows(rows) == ["| " + " | ".join(_md(c) for c in r) + " |" for r in rows], rows


def _events_of_few_descriptions() -> list[dict]:
    """Event items as the model builds them (shared description objects), with members that differ in one place."""
    import importlib

    render_module = importlib.import_module("dpaudit.report.render")
    params = {"epsilon": 0.5, "scale": 2.0, "grid": 0.001, "dimension": 1}
    twin = dict(params)  # equal content, another object
    sens = {"value": 1.0, "norm": "abs", "formula": "count", "source": "s"}
    assumptions: list[str] = []
    events = []
    for i, (p, mult, label, plugin, eps, released) in enumerate([
            (params, 1, "count", "session", 0.5, 1), (params, 1, "count", "session", 1.0, 0),
            (twin, 1, "count", "session", 1.5, 1),  # equal parameters in another object
            (dict(params, epsilon=0.25), 1, "count", "session", 1.75, 1),
            (params, 1.0, "count", "session", 2.25, 1), (params, True, "count", "session", 2.75, 1),  # 1, 1.0, true
            (params, 1, "count%s", "session", 3.0, 1), (params, 1, 'a "quoted" \x00 label', "session", 3.5, 1),
            (params, 1, "count", "plugin-b", 4.0, 2), (params, 1, "count", "session", float("inf"), 1),
            (params, 1, "count", "session", -0.0, True), (params, 1, "count", "session", 5, 1),
            (params, 1, "count", "session", 5.5, 1), (params, 1, "count", "session", 6.5, 1)]):
        when = {12: float("nan"), 13: -float("inf")}.get(i, 1.7e9 + i / 7)  # (the last two: a time not finite)
        events.append({"seq": 2 * i + 1, "time": when, "plugin": plugin, "mechanism": "laplace",
                       "epsilon_spent": eps, "bound_source": "rdp", "kind": "laplace", "label": label,
                       "parameters": p, "multiplicity": mult, "sensitivity": sens, "assumptions": assumptions,
                       "releases": released})
    events.append({**events[0], "extra": 1})  # another shape
    assert tuple(events[0]) == render_module._EVENT_KEYS
    return events


def test_events_encode_as_json_encodes_each_alone():
    """The templated event encoding (one template per description) gives each item's own bytes, also where two
    items differ only in one member: an equal parameters object, a parameter, 1 / 1.0 / true, a label with % or a
    quote or a NUL, the plugin, a non-finite or a negative-zero number, a boolean or int where a float stood."""
    import importlib

    render_module = importlib.import_module("dpaudit.report.render")
    events = _events_of_few_descriptions()
    assert render_module._encode_events(events) == [render_module._encode_item(e) for e in events]
    rng = random.Random(1)
    shuffled = rng.sample(events, len(events)) * 3
    assert render_module._encode_events(shuffled) == [render_module._encode_item(e) for e in shuffled]


def test_the_event_encoding_test_catches_a_template_without_exact_types_or_labels(monkeypatch):
    """Broken variants: members checked by ``isinstance`` instead of their exact types (1 and true share a
    template), or keyed without the strings (two labels share one): the test above fails on each."""
    import importlib

    render_module = importlib.import_module("dpaudit.report.render")
    events = _events_of_few_descriptions()
    expected = [render_module._encode_item(e) for e in events]
    monkeypatch.setattr(render_module, "type", lambda v: int if isinstance(v, int) else v.__class__, raising=False)
    assert render_module._encode_events(events) != expected
    monkeypatch.undo()
    monkeypatch.setattr(render_module, "_event_strings", lambda e: ())
    assert render_module._encode_events(events) != expected


def _cumulative_items() -> list:
    """Items of the ``cumulative_epsilon`` list as the model builds them, and items that only look alike."""
    items = [{"seq": s, "epsilon": e} for s, e in enumerate([0.5, 1e-300, 5e-324, 1.7976931348623157e308, -0.0,
                                                               0.1 + 0.2, 12.593216193945741, 1e16, 1e-5])]
    items += [{"seq": 1, "epsilon": 2}, {"seq": True, "epsilon": 0.5}, {"seq": 1, "epsilon": True},
              {"seq": 1.0, "epsilon": 0.5}, {"seq": 1, "epsilon": float("inf")}, {"seq": 1, "epsilon": -float("inf")},
              {"seq": 1, "epsilon": float("nan")}, {"epsilon": 0.5, "seq": 1}, {"seq": 1}, {"seq": 1, "eps": 0.5},
              {"seq": 1, "epsilon": 0.5, "x": 1}, {"seq": 2**70, "epsilon": 0.5}, [1, 0.5]]
    return items


def test_cumulative_epsilon_encodes_as_json_encodes_each_alone():
    """The written form of the ``cumulative_epsilon`` items is json's, item by item: floats at the ends of their
    range, -0.0, an int, a bool, a non-finite number (json writes ``Infinity`` / ``NaN``), other keys, key order."""
    import importlib

    render_module = importlib.import_module("dpaudit.report.render")
    items = _cumulative_items()
    assert render_module._encode_cumulative(items) == [render_module._encode_item(i) for i in items]


def _assert_broken_variants_differ(monkeypatch, encoder: str, items: list, *, escapes: bool) -> None:
    """Each broken variant of the fast encoder ``encoder`` of ``render`` writes ``items`` otherwise than json does:
    without the finiteness check (``inf`` as Python spells it), with ``isinstance`` instead of the exact type
    (``True`` as Python spells it), and (``escapes``) with strings written without json's escapes."""
    import importlib

    render_module = importlib.import_module("dpaudit.report.render")
    expected = [render_module._encode_item(i) for i in items]
    broken = [("_NOT_FINITE", frozenset()), ("type", lambda v: int if isinstance(v, int) else v.__class__)]
    broken += [("_encode_string", lambda text: f'"{text}"')] if escapes else []
    for name, variant in broken:
        monkeypatch.setattr(render_module, name, variant, raising=False)
        assert getattr(render_module, encoder)(items) != expected, name
        monkeypatch.undo()


def test_the_cumulative_test_catches_an_encoder_without_the_finiteness_or_type_checks(monkeypatch):
    _assert_broken_variants_differ(monkeypatch, "_encode_cumulative", _cumulative_items(), escapes=False)


def _released_items() -> list:
    """Items of the ``released`` list as the model builds them (a scalar value, no file), and items that only look
    alike (other types, a non-finite value, a file, other keys or key order, strings that json escapes)."""
    base = {"seq": 2, "charge_seq": 1, "plugin": "session", "mechanism": "laplace", "label": "count", "value": 58.25,
            "file": None}
    items = [dict(base, value=v) for v in (0.5, 1e-300, 5e-324, 1.7976931348623157e308, -0.0, 0.1 + 0.2, 1e16, 1e-5,
                                          3, -7, 2**70)]
    items += [dict(base, label=text) for text in ('a "quoted" \\ label', "tab\there", "nul \x00", "ε = 1", "\u2028",
                                                  "count%s", "")]
    items += [dict(base, value=True), dict(base, value=None), dict(base, value=[1.0, 2.0]), dict(base, value="x"),
              dict(base, value=float("inf")), dict(base, value=-float("inf")), dict(base, value=float("nan")),
              dict(base, seq=True), dict(base, charge_seq=1.0), dict(base, plugin=1), dict(base, label=None),
              dict(base, file={"path": "outputs/x.npy", "sha256": "0" * 64, "dtype": "float64", "shape": [2]}),
              {k: base[k] for k in reversed(base)}, dict(base, extra=1), {k: base[k] for k in list(base)[:-1]},
              [1, 0.5]]
    return items


def test_released_items_encode_as_json_encodes_each_alone():
    """The written form of the ``released`` items is json's, item by item: floats at the ends of their range, -0.0,
    ints (also beyond 64 bits), strings json escapes (quote, backslash, tab, NUL, non-ASCII), a bool, None, a list,
    a non-finite number (json writes ``Infinity`` / ``NaN``), a file, other keys, key order."""
    import importlib

    render_module = importlib.import_module("dpaudit.report.render")
    items = _released_items()
    assert render_module._encode_released(items) == [render_module._encode_item(i) for i in items]


def test_the_released_test_catches_an_encoder_without_its_checks(monkeypatch):
    _assert_broken_variants_differ(monkeypatch, "_encode_released", _released_items(), escapes=True)


def test_report_files_are_the_utf8_of_the_renderers(demo_like):
    """The bytes ``verify`` compares and ``write_reports`` writes (each piece encoded alone) are the UTF-8 of
    :func:`render_markdown` and :func:`render_json`, for a model whose per-record lines are ASCII and whose other
    parts are not (the reason for encoding piece by piece)."""
    import importlib

    render_module = importlib.import_module("dpaudit.report.render")
    report = build_report(demo_like.run_dir)
    assert render_module.REPORT_FILES["report.md"](report) == render_module.render_markdown(report).encode("utf-8")
    assert render_module.REPORT_FILES["report.json"](report) == render_module.render_json(report).encode("utf-8")
    assert "ε" in render_module.render_markdown(report) and "ε" in render_module.render_json(report)


def test_released_cells_read_as_released_value_reads_them(monkeypatch):
    """The released-values table's cell (a fast path for a scalar without a file) is
    :func:`~dpaudit.report.wording.released_value`'s text for every kind of released item; broken variants (no
    finiteness check: ``inf`` as Python spells it; ``isinstance`` for the exact type: ``True``) are caught."""
    import importlib

    from dpaudit.report.wording import released_value

    render_module = importlib.import_module("dpaudit.report.render")
    items = [i for i in _released_items() if isinstance(i, dict) and {"value", "file"} <= i.keys()]
    items.append({**items[0], "value": {"model_sha256": "0" * 64, "n_parameters": 3}})
    expected = [released_value(i) for i in items]
    assert [render_module._released_cell(i) for i in items] == expected
    monkeypatch.setattr(render_module, "_NOT_FINITE", frozenset())
    assert [render_module._released_cell(i) for i in items] != expected
    monkeypatch.undo()
    monkeypatch.setattr(render_module, "type", lambda v: int if isinstance(v, int) else v.__class__, raising=False)
    assert [render_module._released_cell(i) for i in items] != expected


_JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
                   | st.tuples(inner, inner) | st.dictionaries(st.integers(), inner, max_size=2)),
    max_leaves=25)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_JSON_LIKE)
def test_the_indenting_writer_is_jsons_own(value):
    """report.json's indented values (the certificate, its assumptions) are written with json's C encoder per
    scalar; the text must be json's indenting encoder's, with every line after the first indented by the pad: any
    value a model can hold, NaN and infinities, escapes, empty and nested containers, tuples and non-string keys
    (handed to json itself) included."""
    from dpaudit.report.render import _indented

    for pad in ("", "  "):
        assert _indented(value, pad) == json.dumps(value, indent=2, sort_keys=True,
                                                   ensure_ascii=False).replace("\n", "\n" + pad)

