"""The SDK's types as checks: as strict as the API, closed where it is closed; made from the schemas
committed in workbook/api/sdk_schemas/ when they are what the installed SDK gives, else built in this
process; nothing written or cached at run time, nothing run but the SDK's and pydantic's own code."""

import re
import subprocess
import sys

from workbook.api import contract, sdk_types

import pytest
from conftest import ROOT

TEXT = {"type": "text", "text": "hi"}


def request(*content, **fields) -> dict:
    return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": list(content)}]} | fields


def result(content) -> dict:
    return {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}


def test_a_well_formed_request_and_response_fit():
    assert contract.fits("request", request(TEXT, stream=True))
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [TEXT]}
    message |= {
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    assert contract.fits("message", message)
    assert contract.fits("message", message | {"a_field_from_a_newer_api": 1})  # responses stay open


def test_an_object_where_the_sdk_says_an_iterable_is_refused():
    # Lax pydantic reads a dict as the iterable of its keys; the API refuses it, and so does the check.
    assert not contract.fits("request", request(result({"a": 1})))
    assert contract.fits("request", request(result([TEXT]))) and contract.fits(
        "request", request(result("ok"))
    )


def test_nothing_is_coerced():
    assert not contract.fits("request", request(TEXT, max_tokens="5"))
    assert not contract.fits("request", request(TEXT, max_tokens=True))
    assert not contract.fits("request", request({"type": "text", "text": 5}))


def test_a_request_refuses_a_field_the_api_does_not_know_at_any_depth():
    assert not contract.fits("request", request(TEXT, foo=1))
    assert not contract.fits("request", request(TEXT | {"foo": 1}))
    assert contract.shape_problems("request", request(TEXT | {"foo": 1})) == [
        contract.Problem("messages.0.content.0.foo", "Extra inputs are not permitted")
    ]


def test_a_block_is_picked_by_its_type_and_an_unknown_type_is_named():
    problems = contract.shape_problems("request", request({"type": "txet", "text": "x"}))
    assert str(problems[0]).startswith("messages.0.content.0.type: Input tag 'txet'")
    tools = [{"name": "t", "input_schema": {"type": "object"}}]  # a custom tool may omit its `type`
    assert contract.fits("request", request(TEXT, tools=tools))


def test_one_message_fits_as_the_whole_request_would():
    for message in ({"role": "user", "content": [TEXT]}, {"role": "user", "content": [result({"a": 1})]}):
        whole = contract.fits("request", {"model": "m", "max_tokens": 5, "messages": [message]})
        assert contract.message_fits("request", message) is whole


def test_the_checks_are_built_in_process_and_write_nothing(tmp_path):
    code = (
        "from workbook.api import contract; assert contract.fits('request', {'model': 'm', 'max_tokens': 1, "
        "'messages': [{'role': 'user', 'content': 'hi'}]})"
    )
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # no cache folder, no file


def test_the_checks_come_from_the_installed_sdks_types():
    assert set(sdk_types.TYPES) == {"request", "beta_request", "message", "error", "event"}
    assert all(module.startswith("anthropic.types") for module, _, _ in sdk_types.TYPES.values())


def test_the_committed_schemas_are_what_the_installed_sdk_gives():
    # workbook/api/sdk_schemas/ is generated source: stale after an SDK or pydantic upgrade until rewritten.
    # Asked in a fresh process, as the generator writes them (sdk_types.committed_differences says why).
    command = [sys.executable, "-m", "workbook.api.sdk_types", "--check"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # names the command that rewrites them


def test_a_stale_committed_schema_is_named(tmp_path):
    for name, text in sdk_types.sources().items():
        (tmp_path / name).write_text(text.replace('"forbid"', '"allow"') if name == "request.json" else text)
    assert sdk_types.committed_differences(tmp_path) == [
        f"request.json is not what {sdk_types.installed()} gives"
    ]


def test_the_committed_schemas_are_data_naming_their_few_classes_for_import():
    import json

    files = sorted(sdk_types.SCHEMAS.glob("*.json"))
    assert [path.stem for path in files] == sorted(sdk_types.TYPES)
    committed = {path.stem: json.loads(path.read_text()) for path in files}
    assert all(set(c) == {"note", "generated_from", "schema"} for c in committed.values())
    imports = set(re.findall(r'\{"import": "([^"]+)"\}', (sdk_types.SCHEMAS / "request.json").read_text()))
    assert imports == {
        "typing:Sequence",
        "typing:IO",
        "os:PathLike",
        "pydantic._internal._validators:sequence_validator",
        "workbook.api.sdk_types:_type_or_none",
    }


def test_another_installed_sdk_gets_checks_built_from_its_own_types(monkeypatch):
    cached = (sdk_types._checked, sdk_types.validator, sdk_types.message_validator)
    monkeypatch.setattr(sdk_types, "installed", lambda: {"anthropic": "2.99.0"})
    for function in cached:
        function.cache_clear()
    try:
        assert sdk_types._checked("request") is sdk_types._tightened("request")
        assert not contract.fits("request", request(result({"a": 1})))
        assert not contract.message_fits("request", {"role": "user", "content": [TEXT | {"foo": 1}]})
        assert contract.fits("request", request(TEXT))
    finally:
        for function in cached:
            function.cache_clear()


def test_the_generator_says_how_to_run_it(capsys):
    assert sdk_types.main([]) == 2
    assert sdk_types.COMMAND in capsys.readouterr().err


def test_the_committed_checks_judge_as_the_ones_built_in_process():
    # The committed form keeps only what validate_python reads (sdk_types' docstring): every fixture's
    # requests and responses, and each with a field swapped for a wrong kind or an unknown one added,
    # get the same verdict from both.
    import json

    import pydantic_core

    found = {name: [] for name in sdk_types.TYPES}

    def collect(node):
        if isinstance(node, dict):
            kind = node.get("type")
            if "messages" in node and "model" in node:
                found["request"].append(node), found["beta_request"].append(node)
            elif kind in ("message", "error"):
                found[kind].append(node)
            elif isinstance(kind, str) and kind.startswith(("message_", "content_block_")):
                found["event"].append(node)
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for path in sorted((ROOT / "fixtures").glob("*.json")):
        collect(json.loads(path.read_text()))

    def variants(value):
        yield value
        for key in value if isinstance(value, dict) else ():
            for wrong in ({"a": 1}, "5", 5, None, [{"a": 1}]):
                yield value | {key: wrong}
            yield value | {"unknown": 1}
            if isinstance(value[key], list) and value[key]:
                for item in variants(value[key][0]):
                    yield value | {key: [item]}

    verdicts = []
    for name, values in found.items():
        committed = sdk_types.validator(name)
        built = pydantic_core.SchemaValidator(sdk_types._tightened(name))
        for value in {json.dumps(v, sort_keys=True): v for v in values}.values():
            for variant in variants(value):
                verdicts.append(contract._valid(committed, variant))
                assert verdicts[-1] == contract._valid(built, variant), (name, variant)
    assert verdicts.count(True) > 1_000 and verdicts.count(False) > 10_000


@pytest.fixture
def committed_request(tmp_path, monkeypatch):
    """Commit an edited request.json in a folder of its own: `commit(old, new)` swaps the first `old` in
    the real file for `new`; the checks' cache is cleared before and after."""

    def commit(old: str, new: str) -> None:
        text = (sdk_types.SCHEMAS / "request.json").read_text().replace(old, new, 1)
        (tmp_path / "committed").mkdir()
        (tmp_path / "committed" / "request.json").write_text(text)
        monkeypatch.setattr(sdk_types, "SCHEMAS", tmp_path / "committed")
        sdk_types._checked.cache_clear()

    yield commit
    sdk_types._checked.cache_clear()


def test_a_name_the_installed_pydantic_lacks_is_only_an_error_for_the_versions_it_was_generated_from(
    committed_request, monkeypatch
):
    committed_request("sequence_validator", "gone_validator")
    with pytest.raises(ImportError, match="gone_validator.*--write"):
        sdk_types._checked("request")
    monkeypatch.setattr(sdk_types, "installed", lambda: {"anthropic": "2.99.0"})
    assert sdk_types._checked("request") is sdk_types._tightened("request")  # built: the name unread


def test_a_committed_schema_cannot_make_the_workbook_import_a_module_it_does_not_list(
    committed_request, tmp_path, monkeypatch
):
    """The files are data: a name outside sdk_types.IMPORTABLE (an edited or planted file) is never
    imported, only reported, as a missing one is."""
    (tmp_path / "planted_module_for_sdk_types.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    committed_request("typing:IO", "planted_module_for_sdk_types:anything")
    with pytest.raises(ImportError, match="planted_module_for_sdk_types:anything.*--write"):
        sdk_types._checked("request")
    assert "planted_module_for_sdk_types" not in sys.modules
