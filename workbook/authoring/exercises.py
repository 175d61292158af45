"""exercises.py — build each exercise from its step: the piece cut out, a plain "# TODO" in its place.

    python -m workbook.authoring.exercises           write exercises/NN_<piece>.py for every exercise
    python -m workbook.authoring.exercises --check   say which exercise files are stale, exit 1 if any

An exercise is never written by hand: the step is the answer, and it changes. The catalogue
(workbook/classroom/exercises.toml) names each exercise's piece, a function of the step, by name. This
tool reads the step's source, keeps that function's signature and docstring, puts a "# TODO" and the
step's own numbered stage comments where its body was, and imports every name the step's body used,
the way the step imports it (so the import block is still a map of the course). The rest of the
program is the step itself: the checker runs the step with the student's piece in its place.

A student writes only inside the function: `scaffold` is the file with that body taken out, and a
file whose scaffold differs from the step's is stale (tests/authoring/test_exercises.py).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from workbook import paths
from workbook.classroom.exercise_data import EXERCISES, Exercise

FOLDER = paths.ROOT / "exercises"
TODO = "# TODO"
MAIN = """if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))"""
LINE_LENGTH = 110  # pyproject.toml's, as ruff formats
STAGE = re.compile(r"^\s*# (\d+\.|\(new in s\d\d\))")  # a loop's numbered stage comment: "# 1. Send ..."


def step_source(exercise: Exercise) -> str:
    return paths.step_file(exercise.step).read_text(encoding="utf-8")


def find_function(tree: ast.Module, name: str, owner: str | None = None) -> ast.FunctionDef:
    """The step's top-level function of that name, or its class `owner`'s method (the catalogue names
    pieces by function)."""
    body = tree.body
    if owner:
        body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == owner), [])
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    where = f"in class {owner}" if owner else "at the top level"
    raise LookupError(f"no function {name}() {where} of the step")


def dedented(lines: list[str], columns: int) -> list[str]:
    """A method's lines as a top-level function's: `columns` spaces less at the start of each."""
    return [line if line[:columns].strip() else line[columns:] for line in lines]


def names_used(function: ast.FunctionDef) -> set[str]:
    """Every name from outside the function that it reads: in its body, annotations and defaults."""
    names = [n for n in ast.walk(function) if isinstance(n, ast.Name)]
    local = {n.id for n in names if not isinstance(n.ctx, ast.Load)}
    local |= {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    return {n.id for n in names if isinstance(n.ctx, ast.Load)} - local


def imports_for(tree: ast.Module, step: str, wanted: set[str]) -> list[str]:
    """The import lines that give `wanted` as the step has them: its own imports, filtered, and the
    step's own definitions from the step. Ordered as ruff's isort would: the standard library, the
    workbook, the SDK, then the steps."""
    lines: dict[str, list[str]] = {"std": [], "workbook": [], "packages": [], "steps": []}

    def section(module: str) -> str:
        top = module.split(".")[0]
        if top == "workbook":
            return "workbook"
        if re.match(r"s\d\d_", top):
            return "steps"
        return "std" if top in sys.stdlib_module_names else "packages"

    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound in wanted:
                    text = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    lines[section(alias.name)].append(text)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [a for a in node.names if (a.asname or a.name) in wanted]
            if names:
                listed = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
                lines[section(node.module)].append(f"from {node.module} import {listed}")
    own = sorted(wanted & defined_in(tree), key=lambda n: (not n.isupper(), n[:1].islower(), n))
    if own:
        module = paths.step_module(step)
        lines[section(module)].append(f"from {module} import {', '.join(own)}")
    blocks = [sorted(set(map(wrapped, group)), key=isort_key) for group in lines.values() if group]
    return ["\n".join(block) for block in blocks]


def wrapped(line: str) -> str:
    """An import line as ruff formats it: one name a line, in parentheses, when it is too long."""
    if len(line) <= LINE_LENGTH:
        return line
    head, names = line.split(" import ")
    return head + " import (\n" + "".join(f"    {name},\n" for name in names.split(", ")) + ")"


def isort_key(line: str) -> tuple:
    """`import x` before `from x import y`, each by module, as ruff's isort sorts a section."""
    words = line.split()
    return (words[0] == "from", words[1].lower())


def defined_in(tree: ast.Module) -> set[str]:
    """The names the step itself defines at the top level."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def todo_body(lines: list[str], function: ast.FunctionDef, exercise: Exercise) -> list[str]:
    """What stands where the body was: the TODO, the step's own stage comments as a checklist (so the
    student writes the stages the step names), and an error that says the piece is not written yet."""
    indent = " " * (function.body[0].col_offset - function.col_offset)
    body = lines[body_start(function) - 1 : function.end_lineno]
    stages, going = [], False
    for line in body:  # each stage comment, with the lines that carry it on ("#    ...")
        going = bool(STAGE.match(line) or (going and re.match(r"^\s*#\s{2,}", line)))
        stages += [line.strip()] if going else []
    out = [f"{indent}{TODO}: write {function.name}()'s body. Check it: python -m workbook exercise"]
    if stages:
        out.append(f"{indent}#   The step's stages, in order (one comment each in its code):")
        out += [f"{indent}#   {stage[2:]}" for stage in stages]
    said = f"exercise {exercise.number}: {function.name}() is not written yet"
    out.append(f'{indent}raise NotImplementedError("{said}")')
    return out


def body_start(function: ast.FunctionDef) -> int:
    """The first line of the body after the docstring (1-based)."""
    first = function.body[0]
    has_doc = (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
    if has_doc and len(function.body) > 1:
        return function.body[1].lineno
    return first.end_lineno + 1 if has_doc else first.lineno


def build(exercise: Exercise, source: str | None = None) -> str:
    """The exercise file's text, from the step's source (by default the step as it is now)."""
    source = step_source(exercise) if source is None else source
    tree = ast.parse(source)
    function = find_function(tree, exercise.piece, exercise.owner)
    lines = source.splitlines()
    start = (function.decorator_list[0].lineno if function.decorator_list else function.lineno) - 1
    head = dedented(lines[start : body_start(function) - 1], function.col_offset)
    imports = imports_for(tree, exercise.step, names_used(function) - {exercise.piece})
    doc = [
        f'"""Exercise {exercise.number}, {paths.step_path(exercise.step)}: {exercise.piece}()',
        "",
        f"{exercise.about['en'][:1].upper()}{exercise.about['en'][1:]}.",
        "",
        f"Write the body of {exercise.piece}() below: the piece {exercise.step[:3]} is about. The rest of "
        "the",
        f"program is {paths.step_path(exercise.step)} itself, which runs with your {exercise.piece}() in its "
        "place.",
        *(
            [f"It is a method of the step's {exercise.owner}: `self` is the {exercise.owner} the step made."]
            if exercise.owner
            else []
        ),
        "",
        f"Check it:     python -m workbook exercise        (or: python exercises/{file_name(exercise)})",
        f"A hint:       python -m workbook exercise hint {exercise.number}"
        "   (up to three, each more specific)",
        f"Start over:   python -m workbook exercise reset {exercise.number}",
        f"The answer is {paths.step_path(exercise.step)}: read it once yours passes.",
        "",
        "Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for",
        "the body you write.",
        '"""',
    ]
    parts = [
        "\n".join(doc),
        "import sys\nfrom pathlib import Path\n\n"
        "sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up",
        *imports,
        "\n".join(head + todo_body(lines, function, exercise)),
        MAIN,
    ]
    return "\n\n".join(parts[:-2]) + f"\n\n\n{parts[-2]}\n\n\n{parts[-1]}\n"


def answered(exercise: Exercise, edits: tuple = ()) -> str:
    """The exercise as if solved with the step's own body, after `edits` ((old, new) pairs, each of
    which must occur in the step's piece): the step's answer, or a classic wrong answer made from it."""
    source = step_source(exercise)
    tree = ast.parse(source)
    function = find_function(tree, exercise.piece, exercise.owner)
    lines = source.splitlines()
    body = "\n".join(lines[body_start(function) - 1 : function.end_lineno])
    for old, new in edits:
        if old not in body:
            raise LookupError(f"{exercise.step}.{exercise.qualified}() no longer holds {old!r}")
        body = body.replace(old, new)
    body = "\n".join(dedented(body.split("\n"), function.col_offset))
    text = build(exercise, source)
    stub = find_function(ast.parse(text), exercise.piece)
    mine = text.splitlines()
    return "\n".join(mine[: body_start(stub) - 1] + [body] + mine[stub.end_lineno :]) + "\n"


def file_name(exercise: Exercise) -> str:
    return f"{exercise.number:02d}_{exercise.piece}.py"


def path_of(exercise: Exercise) -> Path:
    return FOLDER / file_name(exercise)


def scaffold(text: str, piece: str) -> str:
    """The file with the piece's body (after its docstring) taken out: what the student may not change."""
    tree = ast.parse(text)
    function = find_function(tree, piece)
    lines = text.splitlines()
    return "\n".join(lines[: body_start(function) - 1] + ["    ..."] + lines[function.end_lineno :])


def stale(exercise: Exercise) -> str | None:
    """Why the exercise file no longer matches its step, or None."""
    path = path_of(exercise)
    if not path.exists():
        return f"{path.name} is missing"
    try:
        mine = scaffold(path.read_text(encoding="utf-8"), exercise.piece)
    except (SyntaxError, LookupError) as err:
        return f"{path.name}: {err}"
    if mine != scaffold(build(exercise), exercise.piece):
        return f"{path.name} is stale: {exercise.step}.py changed around {exercise.piece}()"
    return None


def write(exercise: Exercise) -> Path:
    path = path_of(exercise)
    path.parent.mkdir(exist_ok=True)
    path.write_text(build(exercise), encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        problems = [p for p in map(stale, EXERCISES) if p]
        for problem in problems:
            print(problem)
        if problems:
            print("rebuild them: python -m workbook.authoring.exercises")
        return 1 if problems else 0
    if argv:
        print(__doc__.split("\n\n")[1])
        return 2
    for exercise in EXERCISES:
        print(f"wrote {write(exercise).relative_to(paths.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
