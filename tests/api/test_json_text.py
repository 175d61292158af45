"""JSON as the API takes it, read at a bounded cost (workbook/api/json_text.py): red team five's bombs."""

import json
import tracemalloc

from workbook.api import json_text

import pytest

MB = 2**20
PEAK_PER_BYTE = 3  # what measuring a text may cost: its strings taken out, then its brackets, each a copy


def request_of_blocks(block: str, size: int) -> bytes:
    """A request whose one message holds `size` bytes of `block`s: the red team's body."""
    head = '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":['
    count = size // (len(block) + 1)
    return (head + ",".join([block] * count) + "]}]}").encode()


def refusal_and_peak(raw: bytes) -> tuple[str, int]:
    tracemalloc.start()
    try:
        with pytest.raises(json_text.JsonRefused) as refused:
            json_text.loads(raw)
        return str(refused.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("megabytes", [2.9, 32])
def test_a_text_of_bare_empty_blocks_is_refused_unparsed_at_a_small_multiple_of_its_size(megabytes):
    raw = request_of_blocks("{}", int(megabytes * MB))
    line, peak = refusal_and_peak(raw)
    assert "\n" not in line and "JSON objects and arrays" in line and "one per 32 bytes" in line
    assert peak < PEAK_PER_BYTE * len(raw)  # parsed, it would be 30 times its size


def test_blocks_as_dense_as_a_real_recording_are_read():
    raw = request_of_blocks('{"type": "text", "text": "a short line of text"}', MB)
    assert len(json_text.loads(raw)["messages"][0]["content"]) > 20_000


def test_braces_inside_strings_are_text_not_objects():
    raw = json.dumps({"text": "{}" * 100_000}).encode()
    assert json_text.loads(raw) == {"text": "{}" * 100_000}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_numbers(constant):
    with pytest.raises(json_text.JsonRefused, match=f"{constant} is not a JSON number"):
        json_text.loads(f'{{"max_tokens": {constant}}}'.encode())


@pytest.mark.parametrize("escape", [r"\ud800", r"\udc00", r"a\ud800b", r"\ud800\u0041", r"\udc00\ud800"])
def test_a_lone_surrogate_is_refused(escape):
    with pytest.raises(json_text.JsonRefused, match="lone surrogate"):
        json_text.loads(f'{{"text": "{escape}"}}'.encode())


@pytest.mark.parametrize("escape", [r"\ud83d\ude00", r"\\ud800", r"\\\\ud800", r"\u00e9"])
def test_a_surrogate_pair_or_an_escaped_backslash_is_text(escape):
    assert json_text.loads(f'{{"text": "{escape}"}}'.encode()) == json.loads(f'{{"text": "{escape}"}}')


def test_deep_nesting_is_named_as_such_however_many_brackets():
    for raw in (b"[" * 100_000, b"[" * 80 + b"1" + b"]" * 80):
        with pytest.raises(json_text.JsonRefused, match="nested more than 64 levels deep"):
            json_text.loads(raw)


def test_a_big_text_parses_to_the_same_json_as_json_loads():
    """Past SHARED_PARSE_BYTES, each object is made by a hook in Python (other threads run meanwhile)."""
    padded = {"messages": [{"role": "user", "content": "hi"}], "padding": [{"text": "x" * 100}] * 5000}
    big = json.dumps(padded).encode()
    assert len(big) > json_text.SHARED_PARSE_BYTES
    assert json_text.loads(big) == json.loads(big)


@pytest.mark.parametrize("window", [1, 2, 3, 7, 64])
def test_strings_cut_by_a_window_are_read_whole(monkeypatch, window):
    """outside_strings reads a window at a time: a string a window cuts, escaped quotes in it, must be
    counted as one string and its brackets never as the text's."""
    text = json.dumps([{"a": 'q"[{', "b": ["\\", '\\"]', {"c": []}], "d": "é"}] * 3).encode()
    whole = json_text.JSON_STRING.subn(b"", text)
    monkeypatch.setattr(json_text, "WINDOW", window)
    assert json_text.outside_strings(text) == (whole[0].translate(None, json_text.NOT_BRACKETS), whole[1])
