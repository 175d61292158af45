"""workbook/text.py: text cut to fit, at a width in terminal cells, in the middle, or at a word."""

from workbook.text import clip, cut_at_word, cut_middle

from rich.cells import cell_len


def test_text_that_fits_is_left_as_it_is():
    assert clip("hello", 5) == "hello" and clip("", 0) == ""


def test_text_that_does_not_fit_ends_in_an_ellipsis_at_the_width():
    assert clip("hello world", 8) == "hello w…"


def test_wide_characters_count_two_cells():
    cut = clip("智能体的循环就是全部", 9)
    assert cut == "智能体的…" and cell_len(cut) == 9


def test_a_long_text_is_cut_at_once():
    assert clip("x" * 10_000_000, 80) == "x" * 79 + "…"


def test_a_name_cut_in_the_middle_keeps_both_ends():
    assert cut_middle("js-ts_runner-pinned", 11) == "js-ts…inned"
    assert cut_middle("short", 11) == "short"


def test_a_result_is_cut_at_a_word_and_marked():
    said = cut_at_word("turn 3: the reply was not appended before the next request", 30)
    assert said.endswith("…") and len(said) <= 30 and not said[:-1].endswith(("appen", " "))
