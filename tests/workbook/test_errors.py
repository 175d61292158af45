"""workbook/errors.py: an error's message as one line, whatever the error said over several."""

from workbook import errors


def test_an_error_over_several_lines_is_its_first_three_non_blank_lines_on_one():
    err = OSError("  first\n\n  second  \nthird\nfourth")
    assert errors.one_line(err) == "first second third"


def test_a_long_error_is_cut_at_200_characters():
    assert errors.one_line(ValueError("x" * 500)) == "x" * 200
    assert errors.one_line(ValueError("")) == ""


def test_a_fixture_error_is_a_workbook_error():
    assert issubclass(errors.FixtureError, errors.WorkbookError)
    assert not issubclass(errors.WorkbookError, errors.FixtureError)
