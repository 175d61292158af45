"""workbook/cli.py: one entry point, `python -m workbook COMMAND`, each command a line in its usage."""

from workbook import cli


def test_with_no_command_it_lists_every_command(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name}" in out for name in cli.COMMANDS)


def test_a_command_that_does_not_exist_is_one_error_and_the_list(capsys):
    assert cli.main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no command 'bogus'") and "commands:" in err


def test_a_fixture_command_without_files_says_what_to_give(capsys):
    assert cli.main(["check"]) == 2
    assert "check needs one or more fixture files" in capsys.readouterr().err
