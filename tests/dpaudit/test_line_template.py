"""Line templates (dpaudit/line_template.py): a line the ledger reader reads by a template is read as the whole-line
parser reads it, and every line of a template's shape that is not canonical is refused with the parser's verdict."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dpaudit import canonical, ledger, line_template
from dpaudit.errors import LedgerError
from dpaudit.ledger import MALFORMED, Ledger, Record, read_records, verify_chain
from dpaudit.line_template import LineTemplate


def _write(path: Path, bodies: list[dict], rtype: str = "release") -> list[str]:
    with Ledger.create(path) as led:
        for body in bodies:
            led.append(rtype, body)
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _expected(lines: list[str]) -> tuple[list[Record], list[str]]:
    """What the reader must give: each line read alone by the whole-line parser (no template, no shortcut)."""
    records, problems = [], []
    for n, line in enumerate(lines, start=1):
        try:
            records.append(Record.from_line(line))
        except LedgerError as err:
            problems.append(f"line {n}: {MALFORMED}: {err}")
    return records, problems


def _types(records: list[Record]) -> list[list[type]]:
    return [[type(v) for v in r.body.values()] + [type(r.seq), type(r.time)] for r in records]


@pytest.fixture
def template_reads(monkeypatch) -> list[int]:
    """Counts the lines a template read."""
    reads = []
    real = LineTemplate.read
    monkeypatch.setattr(LineTemplate, "read", lambda self, text: (found := real(self, text)) is not None
                        and reads.append(1) or found)
    return reads


def _release(i: int, output) -> dict:
    return {"charge_seq": 2 * i + 1, "label": "count", "mechanism": "laplace", "output": output, "plugin": "session"}


#: numbers at the ends of their range and in every form json writes (exponents, negative zero, beyond 64 bits)
NUMBERS = [0.0, -0.0, 1e16, 1e-05, 5e-324, 1.7976931348623157e308, -1.5, 0.1 + 0.2, 123456789.0, 2.5e-300, 0, 7,
           -3, 2**63, -(2**70), 10**40, 1.0, 1e22, 9007199254740993]


def test_a_run_of_one_shape_is_read_by_templates_as_written(tmp_path: Path, template_reads: list[int]) -> None:
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_release(i, NUMBERS[i % len(NUMBERS)]) for i in range(200)])
    records, problems = read_records(path)
    assert problems == [] and verify_chain(records) == []
    assert records == _expected(lines)[0] and _types(records) == _types(_expected(lines)[0])
    # the shortcut was taken (else this test would show nothing), but for a number of over 32 characters (10**40),
    # which no template reads (a long integer is never converted before the line is judged: read whole)
    long = sum(len(canonical.dumps(NUMBERS[i % len(NUMBERS)])) > 32 for i in range(200))
    assert long > 0 and len(template_reads) >= 195 - long
    assert len({id(r.body["label"]) for r in records}) <= long + 8  # the templates' members shared


@pytest.mark.parametrize(("place", "old", "new"), [
    ("output", '"output":1.5', '"output":1.50'),
    ("output", '"output":1.5', '"output":15e-1'),
    ("output", '"output":1.5', '"output":1.5e0'),
    ("output", '"output":1.5', '"output":01.5'),
    ("output", '"output":1.5', '"output":-0'),
    ("output", '"output":1.5', '"output":1.5.5'),
    ("output", '"output":1.5', '"output":1e999'),
    ("output", '"output":1.5', '"output":1e+5'),
    ("output", '"output":1.5', '"output":0.00001'),  # orjson's form of 1e-05
    ("output", '"output":1.5', '"output":1-5'),
    ("output", '"output":1.5', '"output":1_5'),
    ("output", '"output":1.5', '"output":1.5 '),
    ("charge_seq", '"charge_seq":7,', '"charge_seq":07,'),
    ("charge_seq", '"charge_seq":7,', '"charge_seq":7.0e0,'),
    ("seq", '"seq":3,', '"seq":-3,'),
    ("seq", '"seq":3,', '"seq":3.0,'),
    ("seq", '"seq":3,', '"seq":3e0,'),
    ("time", '"time":', '"time":-'),  # still a float: read as written (not an error), chain aside
    ("time", '"time":', '"time":1'),  # a longer float
])
def test_a_line_of_a_templates_shape_is_refused_or_read_as_the_parser_does(tmp_path: Path, place: str, old: str,
                                                                           new: str) -> None:
    """Attack: a line that matches a learnt template everywhere but one open place, whose text there is not (or is
    another) canonical number. The reader's verdict is the whole-line parser's, message for message."""
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_release(i, 1.5) for i in range(4)])
    assert old in lines[3]
    lines[3] = lines[3].replace(old, new, 1)
    path.write_text("".join(lines), encoding="utf-8")
    records, problems = read_records(path)
    assert (records, problems) == _expected(lines)
    assert _types(records) == _types(_expected(lines)[0])


def test_time_as_an_integer_and_digests_in_capitals_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_release(i, 1.5) for i in range(4)])
    record = Record.from_line(lines[3])
    as_int = lines[3].replace(f'"time":{record.time!r}', f'"time":{int(record.time)}')
    capital = lines[3].replace(record.hash, record.hash.upper())
    for edited in (as_int, capital):
        assert edited != lines[3]
        path.write_text("".join([*lines[:3], edited]), encoding="utf-8")
        records, problems = read_records(path)
        assert (records, problems) == _expected([*lines[:3], edited]) and len(problems) == 1


def test_the_refusal_test_catches_a_template_that_converts_without_checking(tmp_path: Path, monkeypatch) -> None:
    """Broken variant: a template that takes ``float``/``int`` of the text without the canonical check accepts the
    non-canonical lines above (so the test above fails on it)."""
    monkeypatch.setattr(line_template, "canonical_number", lambda text: float(text) if "." in text or "e" in text
                        else int(text))
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_release(i, 1.5) for i in range(4)])
    lines[3] = lines[3].replace('"output":1.5', '"output":1.50', 1)
    path.write_text("".join(lines), encoding="utf-8")
    records, problems = read_records(path)
    assert problems == [] and len(records) == 4  # accepted: not canonical, and the parser refuses it
    assert _expected(lines)[1] != []


def test_canonical_number_is_json_canonical_form() -> None:
    for value in NUMBERS:
        assert line_template.canonical_number(canonical.dumps(value)) == value
        assert type(line_template.canonical_number(canonical.dumps(value))) is type(value)
    for text in ("1.50", "1e0", "-0", "01", "+1", "1.", ".5", "1E5", "inf", "nan", "1e999", "0x10", " 1", "1_0"):
        with pytest.raises(ValueError):
            line_template.canonical_number(text)


def test_a_line_naming_the_nonce_is_read_as_written(tmp_path: Path, template_reads: list[int]) -> None:
    """Attack by someone who knows the process's nonce: a marker in a string learns no template, and at an open place
    (a string, not a number) it is never matched."""
    marker = f"{line_template._NONCE}-0"
    path = tmp_path / "l.jsonl"
    bodies = [{**_release(0, 1.5), "label": marker}, _release(1, 2.5), _release(2, 3.5), {**_release(3, 1.0),
              "output": marker}, {**_release(4, 1.0), "label": f'"{marker}"'}, _release(5, 4.5)]
    lines = _write(path, bodies)
    assert LineTemplate.of(_expected(lines)[0][0].__dict__, len(lines[0])) is None
    records, problems = read_records(path)
    assert (records, problems) == _expected(lines) and problems == []
    assert records[3].body["output"] == marker


def test_long_lines_and_many_numbers_learn_no_template(tmp_path: Path) -> None:
    long = {**_release(0, 1.5), "label": "x" * line_template.MAX_TEMPLATE_CHARS}
    many = {f"n{i}": i for i in range(line_template.MAX_BODY_SLOTS + 1)}
    path = tmp_path / "l.jsonl"
    lines = _write(path, [long, long, many, many, {**many, "n0": 5}])
    records = _expected(lines)[0]
    assert LineTemplate.of(records[0].__dict__, len(lines[0])) is None
    assert LineTemplate.of(records[2].__dict__, len(lines[2])) is None
    fewer = {**records[2].__dict__, "body": {**records[2].body, "n0": "x"}}
    assert LineTemplate.of(fewer, len(lines[2])) is not None
    assert read_records(path) == _expected(lines)


def test_templates_are_learnt_about_log_n_times_where_no_line_repeats_a_shape(tmp_path: Path, monkeypatch) -> None:
    """A template costs an encoding and a regular expression: a ledger of 512 lines of distinct shapes learns at most
    log2(512) + 1 = 10 of them per record type."""
    learnt = []
    real = LineTemplate.of
    monkeypatch.setattr(LineTemplate, "of", classmethod(lambda cls, obj, chars: learnt.append(1)
                                                        or real.__func__(cls, obj, chars)))
    path = tmp_path / "l.jsonl"
    lines = _write(path, [{**_release(i, 1.5), "label": f"query {i}"} for i in range(512)])
    assert read_records(path) == _expected(lines)
    assert 1 <= len(learnt) <= 10


def test_interleaved_shapes_each_keep_a_template(tmp_path: Path, template_reads: list[int]) -> None:
    """Releases of two queries in turn: both shapes are read by templates (the reader keeps several)."""
    path = tmp_path / "l.jsonl"
    lines = _write(path, [{**_release(i, float(i)), "label": ("count", "sum")[i % 2]} for i in range(100)])
    assert read_records(path) == _expected(lines)
    assert len(template_reads) >= 95


def test_random_edits_of_a_ledger_read_as_each_line_alone(tmp_path: Path) -> None:
    """Fuzz (seeded): 300 ledgers of three interleaved shapes of records, each with one to three random one-character
    edits (a digit, a sign, a point, an exponent, a quote, a space or a letter replacing, inserted before or removing
    a character). The reader's records (values and types) and problems are the whole-line parser's, line by line."""
    rng = random.Random(7)
    alphabet = list("0123456789-+.eE\" xa")
    path = tmp_path / "l.jsonl"
    for _ in range(300):
        bodies = []
        for i in range(12):
            shape = i % 3
            charge = {"epsilon_spent": rng.choice(NUMBERS), "event": {"kind": "laplace", "epsilon": 0.5}}
            bodies.append(_release(i, rng.choice(NUMBERS)) if shape == 0 else charge if shape == 1
                          else {"n": rng.randrange(-5, 5), "note": "x"})
        path.unlink(missing_ok=True)
        lines = _write(path, bodies)
        for _ in range(rng.randint(1, 3)):
            n = rng.randrange(len(lines))
            text = lines[n].rstrip("\n")
            at = rng.randrange(len(text))
            how = rng.randrange(3)
            char = rng.choice(alphabet)
            text = (text[:at] + char + text[at + 1:] if how == 0 else text[:at] + char + text[at:] if how == 1
                    else text[:at] + text[at + 1:])
            lines[n] = text + "\n"
        path.write_text("".join(lines), encoding="utf-8")
        records, problems = read_records(path)
        expected_records, expected_problems = _expected(lines)
        assert problems == expected_problems and records == expected_records
        assert _types(records) == _types(expected_records)


def test_a_template_read_record_is_the_parsed_one_in_every_field(tmp_path: Path) -> None:
    """The object a template builds has the parse's keys in the parse's order (the record's attribute dict, and the
    body that ``report.json`` and every check read)."""
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_release(i, 0.5 * i) for i in range(5)])
    template = LineTemplate.of(Record.from_line(lines[1]).__dict__, len(lines[1]))
    obj = template.read(lines[4].rstrip("\n"))
    parsed = ledger._canonical_object(lines[4].rstrip("\n"))
    assert obj == parsed and list(obj) == list(parsed) and list(obj["body"]) == list(parsed["body"])


def _charge(i: int, epsilon: float, clamp: float = 1e301) -> dict:
    return {"bound_source": "rdp", "epsilon_spent": 0.01 * (i + 1),
            "event": {"epsilon": epsilon, "kind": "laplace", "sensitivity": {"norm": "abs", "value": 1.0}},
            "imputation": {"clamp": [-clamp, clamp], "nan": 0.0}, "mechanism": "laplace", "plugin": "session"}


def test_members_differing_in_nested_numbers_are_read_as_written_and_shared_by_text(tmp_path: Path,
                                                                                    template_reads: list[int]) -> None:
    """Charges whose events cycle through three ε (numbers one level down) and whose clamps (in a list) change once:
    every line is read by a template as written, and equal members are one object (kept by their text)."""
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_charge(i, (0.5, 0.25, 1)[i % 3], 1e301 if i < 60 else 7.5) for i in range(120)], "charge")
    records, problems = read_records(path)
    assert problems == [] and records == _expected(lines)[0] and _types(records) == _types(_expected(lines)[0])
    assert [type(r.body["event"]["epsilon"]) for r in records[:3]] == [float, float, int]
    assert len(template_reads) >= 115
    assert len({id(r.body["event"]) for r in records}) == 3
    assert len({id(r.body["imputation"]) for r in records}) == 2


@pytest.mark.parametrize(("old", "new"), [
    ('"epsilon":0.25', '"epsilon":0.250'), ('"epsilon":0.25', '"epsilon":2.5e-1'), ('"value":1.0', '"value":1'),
    ('"value":1.0', '"value":1.00'), ('"clamp":[-7.5', '"clamp":[-07.5'), ('"clamp":[-7.5', '"clamp":[-0'),
    ('"nan":0.0', '"nan":-0.0'), ('"nan":0.0', '"nan":0'),
])
def test_a_nested_number_is_refused_or_read_as_the_parser_does(tmp_path: Path, old: str, new: str) -> None:
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_charge(i, 0.25, 7.5) for i in range(4)], "charge")
    assert old in lines[3]
    lines[3] = lines[3].replace(old, new, 1)
    path.write_text("".join(lines), encoding="utf-8")
    records, problems = read_records(path)
    assert (records, problems) == _expected(lines) and _types(records) == _types(_expected(lines)[0])
    if records[-1].seq == 3:  # read (another canonical number): a member of its own, not the earlier lines'
        assert records[-1].body["event"] is not records[-2].body["event"] or \
            records[-1].body["imputation"] is not records[-2].body["imputation"]


def test_a_template_keeps_a_bounded_number_of_members(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(line_template, "MEMBERS_KEPT", 2)
    path = tmp_path / "l.jsonl"
    lines = _write(path, [_charge(i, 0.5 + (i % 5) / 8) for i in range(40)], "charge")
    records, problems = read_records(path)
    assert problems == [] and records == _expected(lines)[0]
    template = LineTemplate.of(records[0].__dict__, len(lines[0]))
    for line in lines:
        template.read(line.rstrip("\n"))
    assert all(kept is None or len(kept) <= 2 for _, kept in template._parts)
    assert sum(kept is not None for _, kept in template._parts) == 2  # the event and the imputation


def test_many_long_integers_are_read_whole_and_judged_as_the_parser_does(tmp_path: Path) -> None:
    """Review finding: a template converted a 4 300-digit integer (``int`` and ``repr`` are quadratic in the digits)
    before the line was refused elsewhere. A slot longer than 32 characters is no template's; such lines are read
    whole, with the parser's verdict."""
    path = tmp_path / "l.jsonl"
    lines = _write(path, [{f"n{i:02d}": 1 for i in range(16)}] + [{f"n{i:02d}": 7 * 10**200 for i in range(16)}] * 3)
    lines[2] = lines[2].replace('"n15":7', '"n15":07', 1)
    path.write_text("".join(lines), encoding="utf-8")
    assert read_records(path) == _expected(lines)
    template = LineTemplate.of(_expected(lines)[0][0].__dict__, len(lines[0]))
    assert template.read(lines[1].rstrip("\n")) is None and template.read(lines[0].rstrip("\n")) is not None


def test_a_shape_that_keeps_missing_is_tried_rarely(tmp_path: Path, monkeypatch) -> None:
    """Review finding: lines that share a long start with the kept templates but never match them each paid for
    every template. After TEMPLATE_TRIES misses in a row they are tried on the lines of the streak numbered by a power
    of two only; the lines are read as written, and a template that matches again is found again."""
    tried = []
    real = LineTemplate.read
    monkeypatch.setattr(LineTemplate, "read", lambda self, text: tried.append(1) or real(self, text))
    path = tmp_path / "l.jsonl"
    bodies = [{"a": "A" * 500, "z": f"v{i}"} for i in range(1000)] + [{"a": "A" * 500, "z": "w", "n": i}
                                                                         for i in range(100)]
    lines = _write(path, bodies)
    assert read_records(path) == _expected(lines)
    assert len(tried) < 150  # (each of the 1 000 lines tried up to four templates before)
    assert sum(r.body.get("n") is not None for r in read_records(path)[0]) == 100


@pytest.mark.parametrize("depth", [6, 58])
def test_deeply_nested_numbers_that_change_on_every_line_cost_one_parse_of_the_member(
        tmp_path: Path, depth: int, template_reads: list[int]) -> None:
    """Review finding: a member of 64 numbers nested about 60 deep, new on every line, was rebuilt number by number
    and level by level (36x the previous reader). A member whose text is new is parsed once by the C parser (and
    checked canonical); its numbers are not converted one by one. Read as written."""
    def nest(x, d):
        for _ in range(d):
            x = [x]
        return x

    path = tmp_path / "l.jsonl"
    lines = _write(path, [{"a": nest([i * 64 + j + 1 for j in range(64)], depth)} for i in range(30)], "charge")
    converted = []
    real = line_template.canonical_number
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_template, "canonical_number", lambda text: converted.append(text) or real(text))
        records, problems = read_records(path)
    assert problems == [] and records == _expected(lines)[0]
    assert len(template_reads) >= 25 and len(converted) <= 2 * 30  # seq and time; none of the member's numbers


def test_two_threads_reading_ledgers_of_one_shape_each_read_their_own(tmp_path: Path) -> None:
    """Templates and their kept members belong to one read: two threads reading two ledgers of the same shape (but
    other numbers and members) at once each get their own file's records."""
    import threading

    paths, expected = [], []
    for n in range(2):
        path = tmp_path / f"l{n}.jsonl"
        lines = _write(path, [_charge(i, (0.5, 0.25)[(i + n) % 2], 7.5 + n) for i in range(400)], "charge")
        paths.append(path)
        expected.append(_expected(lines))
    results: dict[int, list] = {0: [], 1: []}

    def read(n: int) -> None:
        for _ in range(5):
            results[n].append(read_records(paths[n]))

    threads = [threading.Thread(target=read, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(len(r) == 5 for r in results.values())
    assert all(got == expected[n] for n in range(2) for got in results[n])
