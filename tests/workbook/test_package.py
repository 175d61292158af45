"""The course at the root, the machinery in one package: imports flow one way, modules stay small."""

import ast
import subprocess
import sys

from conftest import ROOT, STEPS

PACKAGE = ROOT / "workbook"
LATER = PACKAGE / "later"  # the later steps, s07 on
MAX_MODULE_LINES = 600


def module_name(path) -> str:
    """workbook/api/contract.py -> workbook.api.contract (a package's __init__ is the package)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports() -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in it: at the top, inside a function, or
    only for type checking. Layers that need each other's types, even in annotations, are one layer."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbook"):
                for alias in node.names:  # `from workbook.api import contract` names a module
                    whole = f"{node.module}.{alias.name}"
                    found.add(whole if whole in modules else node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("workbook")}
        graph[name] = {m for m in found if m in modules and m != name and not name.startswith(m + ".")}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in the graph, as the modules around it, or None."""
    state = {}  # module -> "open" while its imports are walked, "done" after

    def walk(module, path):
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return path[path.index(imported) :] + [imported]
            if imported not in state:
                found = walk(imported, path + [imported])
                if found:
                    return found
        state[module] = "done"
        return None

    for module in sorted(graph):
        found = module not in state and walk(module, [module])
        if found:
            return found
    return None


def test_the_root_holds_exactly_the_six_steps_and_the_later_ones_live_in_workbook_later():
    assert sorted(p.stem for p in ROOT.glob("*.py")) == sorted(STEPS[:6])
    assert sorted(p.stem for p in LATER.glob("s*.py")) == sorted(STEPS[6:])


def test_no_import_cycle_among_the_package_modules():
    graph = package_imports()
    assert "workbook.replay.transport" in graph["workbook.launch"]  # the walk sees real imports
    assert cycle(graph) is None


def test_the_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_nothing_in_the_package_imports_a_step_but_the_later_steps_themselves():
    for path in PACKAGE.rglob("*.py"):
        if path.parent == LATER:  # lessons: they import and extend the six, as a reader's code would
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            steps = set(STEPS) | {f"workbook.later.{step}" for step in STEPS} | {"workbook.later"}
            assert not set(names) & steps, f"{path.name} imports a step"


def test_no_module_in_the_package_is_over_600_lines():
    # keyed by the path in the package: two modules may share a name (classroom/ and authoring/ each
    # have an exercises.py), and one must not hide the other
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert len(sizes) == len(list(PACKAGE.rglob("*.py")))
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_python_m_workbook_lists_its_commands():
    done = subprocess.run(
        [sys.executable, "-m", "workbook", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0
    for command in ("check", "trust", "rebuild", "serve", "grade", "stepdiff"):
        assert f"  {command} " in done.stdout


def test_the_public_interface_is_importable_from_the_top():
    from workbook import copy_workspace, load_fixture, replay_client

    fixture = load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    client, transport = replay_client(fixture, "s01_hello_agent.json", match="conversation")
    assert transport.player.match == "conversation" and client.api_key == "replay"
    assert copy_workspace(fixture["workspace"]).is_dir()


def test_no_module_in_the_package_plays_tricks():
    """No import hook, no switching the collector, no code written somewhere and run from there."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {
            f"{n.value.id}.{n.attr}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        }
        imported = {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names
        }
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {"exec", "sys.meta_path", "gc.disable"} & names and "marshal" not in imported, path.name


def test_saving_a_file_or_copying_a_workspace_does_not_load_the_sdk():
    """The SDK takes a second or more of CPU to import: a program that only saves a file, copies a
    workspace or raises the workbook's error (the kill -9 tests' savers) has no use for it."""
    probe = "import sys, workbook.errors, workbook.files, workbook.scratch; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    loaded = done.stdout.split("'")
    assert done.returncode == 0 and "workbook.scratch" in loaded, done.stderr
    assert "anthropic" not in loaded and "pydantic" not in loaded


def test_a_replays_own_errors_are_the_workbooks_and_the_sdks_too():
    from workbook import errors
    from workbook.replay import transport

    import anthropic

    for error in (transport.ReplayMismatch, transport.ReplayExhausted):
        assert issubclass(error, errors.WorkbookError) and issubclass(error, anthropic.AnthropicError)
    assert not issubclass(errors.WorkbookError, anthropic.AnthropicError)
