"""workbook/classroom/columns.py: the class table in 80 columns, names and results cut with a mark."""

from workbook.classroom import columns
from workbook.text import cut_middle


def test_two_names_that_cut_alike_get_labels_that_differ_and_keep_them():
    a, b = "abcd-xxxxxxxx-wxyz", "abcd-yyyyyyyy-wxyz"  # the same five characters at each end
    assert cut_middle(a, 11) == cut_middle(b, 11)
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
