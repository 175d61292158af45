"""workbook/classroom/columns.py: the class table in 80 columns, names and results cut with a mark."""

from workbook.classroom import columns


def test_a_name_cut_in_the_middle_keeps_both_ends():
    assert columns.cut_middle("js-ts_runner-pinned", 11) == "js-ts…inned"
    assert columns.cut_middle("short", 11) == "short"


def test_a_result_is_cut_at_a_word_and_marked():
    said = columns.cut_at_word("turn 3: the reply was not appended before the next request", 30)
    assert said.endswith("…") and len(said) <= 30 and not said[:-1].endswith(("appen", " "))


def test_two_names_that_cut_alike_get_labels_that_differ_and_keep_them():
    a, b = "abcd-xxxxxxxx-wxyz", "abcd-yyyyyyyy-wxyz"  # the same five characters at each end
    assert columns.cut_middle(a, 11) == columns.cut_middle(b, 11)
    label = columns.Labels(11)
    first, second = label(a), label(b)
    assert first != second and len(first) <= 11 and len(second) <= 11
    assert label(a) == first  # a name keeps its label from line to line


def test_a_row_with_a_long_result_wraps_it_below_indented():
    row = ("alice", "3", "x" * 10 + " " + "word " * 30)
    text = columns.table_row(row, [8, 3])
    lines = text.splitlines()
    assert len(lines) > 1 and all(len(line) <= columns.TABLE_WIDTH for line in lines)
    assert all(line.startswith("    ") for line in lines[1:])
