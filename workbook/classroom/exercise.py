"""exercise.py — `python -m workbook exercise`: one step's piece at a time, written by you, checked offline.

  python -m workbook exercise            the next exercise not solved: its check
  python -m workbook exercise list       every exercise, and which you solved
  python -m workbook exercise check N    check exercise N (exercises/NN_*.py)
  python -m workbook exercise watch [N]  check again on each save (Ctrl-C stops)
  python -m workbook exercise hint N     the next of N's three hints
  python -m workbook exercise reset N    N as it started (yours kept as .bak)
  --lang en|zh-CN                        the language (default: the locale's)

The check is the grader's (workbook/classroom/ladder.py), not a second judge: the step itself runs with
your piece in its place, up the grader's rungs for that step, each recording served by the replay
server's player; the first rung that fails names your first mistake in the grader's words, with the
request and the message where it went wrong. Then any unit check the idea needs runs (a truth table,
or the step's own recordings replayed). A failure ends with the hint that fits it: the hint of the
classic wrong answer it looks like (workbook/classroom/exercises.toml), or the exercise's first.

Your progress is kept in exercises/progress.txt, a plain file: one line an exercise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import locale
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from workbook import errors, paths
from workbook.classroom import exercise_tables
from workbook.classroom.exercise_data import BY_NUMBER, EXERCISES, LANGS, Exercise

PROGRESS = paths.ROOT / "exercises" / "progress.txt"
TIMEOUT = 60.0  # seconds a rung or a unit check may take
UNIT = "exercise-unit:"  # the line a unit check's run ends with, then its result as JSON
# What the grader runs: the student's file, with the steps and the workbook importable wherever it is
RUN_CODE = (
    f"import sys; sys.path[:0] = [{str(paths.ROOT)!r}]; "
    "from workbook.classroom import exercise; sys.exit(exercise.graded_main(sys.argv[1:]))"
)
NOT_WRITTEN = "NotImplementedError"

WORDS = {  # the checker's own words, by language
    "en": {
        "exercise": "exercise",
        "solved": "solved",
        "todo": "to do",
        "passed": "passed: {file} does what {step} does. Read {answer} now, and compare.",
        "failed": "not yet: {reason}",
        "not_written": "{piece}() is not written yet: open {file} and write its body.",
        "hint": "hint",
        "hints_used": "hints seen",
        "no_more": "that was the last hint; the answer is {answer}",
        "all_done": "every exercise is solved. Well done.",
        "write": "write {piece}() in {file}",
        "checking": "checking {file} ...",
        "watching": "watching {file}: save it to check again (Ctrl-C to stop)",
        "reset": "{file} is as it started (yours was kept as {backup})",
        "wrong_answer": "this looks like a classic wrong answer: {what}",
        "no_exercise": "no exercise {n}: give one of {numbers}",
    },
    "zh-CN": {
        "exercise": "练习",
        "solved": "已完成",
        "todo": "未完成",
        "passed": "通过：{file} 做到了 {step} 做的事。现在读一读 {answer}，对照一下。",
        "failed": "还没有通过：{reason}",
        "not_written": "{piece}() 还没有写：打开 {file}，写出它的函数体。",
        "hint": "提示",
        "hints_used": "已看提示",
        "no_more": "这是最后一条提示；答案就在 {answer} 里",
        "all_done": "所有练习都完成了。做得好。",
        "write": "在 {file} 里写出 {piece}()",
        "checking": "正在检查 {file} ……",
        "watching": "正在盯着 {file}：保存一次就再检查一次（Ctrl-C 停止）",
        "reset": "{file} 已恢复到最初的样子（你的版本留在 {backup}）",
        "wrong_answer": "这看起来是一个典型的错误答案：{what}",
        "no_exercise": "没有练习 {n}：请给出 {numbers} 之一",
    },
}


# -- the program the grader runs: the step, with the student's piece in its place ---------------------


def load_piece(file: str | Path, exercise: Exercise):
    """The student's piece, from their file, loaded as a module of its own (its `__main__` block not run)."""
    spec = importlib.util.spec_from_file_location(f"exercise_{exercise.number:02d}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, exercise.piece)


def step_of(exercise: Exercise):
    """The exercise's step, loaded by the name its entry gives (the steps sit at the repo's root, which
    RUN_CODE puts on sys.path): the package names no step of its own accord."""
    return importlib.import_module(paths.step_module(exercise.step))


def holder(exercise: Exercise, step):
    """Where the piece lives in the step: the module, or the class it is a method of."""
    return getattr(step, exercise.owner) if exercise.owner else step


@contextlib.contextmanager
def swapped(exercise: Exercise, piece):
    """The step, its piece replaced by the student's for as long as this lasts (a method: on its class,
    so every instance the step makes has it)."""
    step = step_of(exercise)
    home = holder(exercise, step)
    own = getattr(home, exercise.piece)
    setattr(home, exercise.piece, piece)
    try:
        yield step
    finally:
        setattr(home, exercise.piece, own)


def exercise_of(file: str | Path) -> Exercise:
    """The exercise a file is, by its name (NN_<piece>.py)."""
    found = re.match(r"(\d+)_", Path(file).name)
    exercise = BY_NUMBER.get(int(found.group(1))) if found else None
    if exercise is None or not Path(file).name.endswith(f"_{exercise.piece}.py"):
        raise errors.WorkbookError(
            f"{Path(file).name}: not an exercise file (NN_<piece>.py, as in exercises/)"
        )
    return exercise


def graded_main(argv: list[str]) -> int:
    """FILE [STEP FLAGS...] TASK: the step's main() with FILE's piece in its place, as the grader runs
    it; FILE --unit: the exercise's unit checks, ending in one line, UNIT and the result as JSON."""
    file, rest = argv[0], argv[1:]
    exercise = exercise_of(file)
    piece = load_piece(file, exercise)
    if rest == ["--unit"]:
        print(f"{UNIT} {json.dumps({'problem': unit_problem(exercise, piece)})}", flush=True)
        return 0
    with swapped(exercise, piece) as step:
        return step.main(rest)


def unit_problem(exercise: Exercise, piece) -> str | None:
    """The first mistake the unit checks find: the truth table, then the step's recordings replayed with
    the piece in place (the in-process replay's words: the request where the loop left the recording)."""
    try:
        if exercise.table:
            problem = exercise_tables.first_mistake(exercise.table, piece, step_of(exercise))
            if problem:
                return problem
        for name in exercise.replays:
            problem = replayed(exercise, piece, name)
            if problem:
                return problem
    except NotImplementedError as err:
        return f"{NOT_WRITTEN}: {err}"
    return None


def replayed(exercise: Exercise, piece, name: str) -> str | None:
    """The step's own replay of fixtures/NAME.json, with the piece in place: None if it ran to the end."""
    out = io.StringIO()
    with swapped(exercise, piece) as step, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = step.main(["--replay", str(paths.ROOT / "fixtures" / f"{name}.json")])
    if code == 0:
        return None
    said = [line.strip() for line in out.getvalue().splitlines() if line.strip().startswith("error")]
    return f"replaying {name}.json: " + (said[-1] if said else f"the step exited {code}")


# -- checking: the grader's rungs, then the unit checks ----------------------------------------------


@dataclass
class Verdict:
    """A check's result: passed, or the first mistake in words and the hint that fits it."""

    passed: bool
    reason: str = ""
    hint: str = ""
    wrong: str = ""  # the classic wrong answer it looks like, in words ("" if none)
    not_written: bool = False


def command(file: Path, exercise: Exercise) -> list[str]:
    return [sys.executable, "-c", RUN_CODE, str(file.resolve()), *exercise.args]


def sandbox_for_student():
    """Your own file, on your own machine: in bubblewrap where it works, else with your rights."""
    from workbook.classroom import sandbox

    try:
        return sandbox.choose("auto")
    except errors.WorkbookError:
        sandbox.hide_from_programs()
        return sandbox.Sandbox()


def check(file: Path, exercise: Exercise, lang: str = "en", chosen=None, servers=None) -> Verdict:
    """Check a file of exercise's: its first mistake, as the grader names it, and the hint that fits.
    The rungs go one at a time, up to the first that fails (`servers`: ladder.Servers to share)."""
    from workbook.classroom import ladder, sandbox

    options = ladder.Options(TIMEOUT, chosen or sandbox_for_student())
    rungs = [rung for name in exercise.rungs for rung in ladder.RUNGS if rung.name == name]
    reason = None
    with contextlib.ExitStack() as stack:
        servers = servers or stack.enter_context(ladder.Servers())
        try:
            for rung in rungs:
                server = servers.of(rung)
                result = ladder.judged(
                    rung, server, ladder.run_rung(server, command(file, exercise), options), options
                )
                if not result.passed:
                    reason = result.reason
                    break
        except KeyboardInterrupt:
            for proc in list(ladder.RUNNING):
                sandbox.stop(proc)
            raise
    if reason is None and (exercise.table or exercise.replays):
        reason = unit_check(file, exercise, options)
    return verdict(exercise, reason, lang)


def unit_check(file: Path, exercise: Exercise, options) -> str | None:
    """Run the unit checks in a program of their own, as the rungs are run (the student's code never
    runs in the checker's process): its UNIT line, or why it gave none."""
    from workbook.classroom import ladder, sandbox

    folder = Path(tempfile.mkdtemp(prefix="exercise-"))
    workspace = folder / "workspace"
    workspace.mkdir()
    run = sandbox.Run(
        [*command(file, exercise)[:4], "--unit"], folder, workspace, "http://127.0.0.1:9", "exercise", TIMEOUT
    )
    try:
        code, output = sandbox.run_program(run, options.sandbox, ladder.RUNNING)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for line in reversed(output.splitlines()):
        if line.startswith(UNIT):
            return json.loads(line[len(UNIT) :])["problem"]
    from workbook.classroom import reasons

    if code is None:
        return f"the unit check did not finish in {TIMEOUT:.0f} s"
    return f"the unit check stopped (exit {code}): {reasons.Outcome([], code, output, []).last_line}"


def verdict(exercise: Exercise, reason: str | None, lang: str) -> Verdict:
    """The hint that fits the first mistake: a classic wrong answer's, else the exercise's first."""
    if reason is None:
        return Verdict(True)
    hints = exercise.hints[lang]
    if NOT_WRITTEN in reason:
        return Verdict(False, reason, hints[0], not_written=True)
    for wrong in exercise.wrong:
        if re.search(wrong.says, reason):
            return Verdict(False, reason, wrong.hint[lang], wrong.what[lang])
    return Verdict(False, reason, hints[0])


# -- progress: a plain file the student can read ------------------------------------------------------


def read_progress(path: Path | None = None) -> dict[int, dict]:
    """number -> {"solved": bool, "hints": n}; an exercise not in the file is not started."""
    path = path or PROGRESS
    progress = {e.number: {"solved": False, "hints": 0} for e in EXERCISES}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            found = re.match(r"(\d+)\s+\S+\s+(solved|to do)\s+hints seen: (\d)", line)
            if found and int(found.group(1)) in progress:
                progress[int(found.group(1))] = {
                    "solved": found.group(2) == "solved",
                    "hints": int(found.group(3)),
                }
    return progress


def write_progress(progress: dict[int, dict], path: Path | None = None) -> None:
    path = path or PROGRESS
    lines = ["# python -m workbook exercise keeps your progress here: read it, or delete it to start over"]
    for e in EXERCISES:
        p = progress[e.number]
        state = "solved" if p["solved"] else "to do"
        lines.append(f"{e.number:02d}  {e.step + '.' + e.qualified:<30} {state:<6}  hints seen: {p['hints']}")
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# -- the command ------------------------------------------------------------------------------------


def default_lang() -> str:
    """Chinese when the locale is Chinese (LANG=zh_CN.UTF-8 ...), else English."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if os.environ.get(name):
            return "zh-CN" if os.environ[name].lower().startswith("zh") else "en"
    code = locale.getlocale()[0] or ""
    return "zh-CN" if code.lower().startswith("zh") else "en"


def file_of(exercise: Exercise, folder: Path | None = None) -> Path:
    return (folder or PROGRESS.parent) / f"{exercise.number:02d}_{exercise.piece}.py"


def shown(path: Path) -> str:
    """A path as the student would type it: relative to the repo when it is inside."""
    return str(path.relative_to(paths.ROOT)) if path.is_relative_to(paths.ROOT) else str(path)


def report(exercise: Exercise, result: Verdict, lang: str, file: Path) -> str:
    """A check's result in the student's language: passed, or the mistake and the hint."""
    w = WORDS[lang]
    if result.passed:
        return w["passed"].format(file=shown(file), step=exercise.step, answer=paths.step_path(exercise.step))
    if result.not_written:
        head = w["not_written"].format(piece=exercise.piece, file=shown(file))
    else:
        head = w["failed"].format(reason=result.reason)
    lines = [head]
    if result.wrong:
        lines.append(w["wrong_answer"].format(what=result.wrong))
    lines.append(f"{w['hint']}: {result.hint}")
    return "\n".join(lines)


def check_and_record(exercise: Exercise, lang: str, file: Path | None = None) -> tuple[bool, str]:
    """Check the exercise's file, keep the result in the progress file, and say it."""
    file = file or file_of(exercise)
    result = check(file, exercise, lang)
    progress = read_progress()
    progress[exercise.number]["solved"] = result.passed
    write_progress(progress)
    return result.passed, report(exercise, result, lang, file)


def check_here(file: str) -> int:
    """`python exercises/NN_<piece>.py`: check that file, in the locale's language."""
    try:
        exercise = exercise_of(file)
    except errors.WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    passed, said = check_and_record(exercise, default_lang(), Path(file))
    print(said)
    return 0 if passed else 1


def title(exercise: Exercise, lang: str) -> str:
    where = paths.step_path(exercise.step)
    return f"{exercise.number}. {where}: {exercise.qualified}() — {exercise.about[lang]}"


def listing(lang: str) -> str:
    w, progress = WORDS[lang], read_progress()
    lines = []
    for e in EXERCISES:
        p = progress[e.number]
        mark = "x" if p["solved"] else " "
        used = f"  ({w['hints_used']}: {p['hints']})" if p["hints"] else ""
        lines.append(f"[{mark}] {title(e, lang)}{used}")
    solved = sum(p["solved"] for p in progress.values())
    lines.append(f"{solved}/{len(EXERCISES)} {w['solved']}: exercises/progress.txt")
    return "\n".join(lines)


def next_hint(exercise: Exercise, lang: str) -> str:
    """The next of the exercise's three hints (the last again, once all are seen)."""
    progress = read_progress()
    seen = progress[exercise.number]["hints"]
    hints = exercise.hints[lang]
    n = min(seen, len(hints) - 1)
    progress[exercise.number]["hints"] = min(seen + 1, len(hints))
    write_progress(progress)
    said = f"{WORDS[lang]['hint']} {n + 1}/{len(hints)}: {hints[n]}"
    if exercise.table:
        said += "\n" + exercise_tables.shown(exercise.table)
    if n == len(hints) - 1:
        said += "\n" + WORDS[lang]["no_more"].format(answer=paths.step_path(exercise.step))
    return said


def reset(exercise: Exercise, lang: str) -> str:
    """The exercise as the authoring tool builds it from its step now; the student's file kept as .bak."""
    from workbook.authoring import exercises as authoring

    file = file_of(exercise)
    backup = file.with_suffix(".py.bak")
    if file.exists():
        shutil.copyfile(file, backup)
    authoring.write(exercise)
    progress = read_progress()
    progress[exercise.number] = {"solved": False, "hints": 0}
    write_progress(progress)
    return WORDS[lang]["reset"].format(file=shown(file), backup=shown(backup))


def watch(exercise: Exercise, lang: str, every: float = 0.5) -> int:
    """Check on every save, until Ctrl-C. (The file's modification time, looked at twice a second.)"""
    file = file_of(exercise)
    print(WORDS[lang]["watching"].format(file=shown(file)))
    seen = None
    try:
        while True:
            stamp = file.stat().st_mtime_ns if file.exists() else None
            if stamp != seen:
                seen = stamp
                print(check_and_record(exercise, lang)[1], flush=True)
            time.sleep(every)
    except KeyboardInterrupt:
        return 0


def next_unsolved(lang: str) -> int:
    """The first exercise not solved yet: what to write, then its check."""
    progress = read_progress()
    todo = [e for e in EXERCISES if not progress[e.number]["solved"]]
    if not todo:
        print(WORDS[lang]["all_done"])
        return 0
    exercise = todo[0]
    print(title(exercise, lang))
    print(WORDS[lang]["write"].format(piece=exercise.piece, file=shown(file_of(exercise))))
    print(WORDS[lang]["checking"].format(file=shown(file_of(exercise))), flush=True)
    passed, said = check_and_record(exercise, lang)
    print(said)
    return 0 if passed else 1


# -- for a class: who solved which -----------------------------------------------------------------


def class_table(folder: Path, chosen) -> tuple[list[str], dict[str, dict[int, Verdict]]]:
    """Each student's exercise files under `folder` (one folder a student, the files in it or below it,
    named as in exercises/), each checked as the student's own check does: (students, their verdicts)."""
    from workbook.classroom import ladder

    found: dict[str, dict[int, Verdict]] = {}
    with ladder.Servers() as servers:
        for file in sorted(folder.rglob("[0-9][0-9]_*.py")):
            student = file.relative_to(folder).parts[0] if file.parent != folder else folder.name
            try:
                exercise = exercise_of(file)
            except errors.WorkbookError:
                continue
            found.setdefault(student, {})[exercise.number] = check(file, exercise, "en", chosen, servers)
    return sorted(found), found


def show_class(folder: Path, chosen) -> int:
    """`grade --exercises FOLDER`: a table, one row a student, one column an exercise: solved (x), tried
    but not yet (the first mistake's first words), or no file (-)."""
    students, found = class_table(folder, chosen)
    if not students:
        print(f"no exercise files (NN_<piece>.py) under {folder}")
        return 1
    print("student".ljust(16) + "".join(f"{e.number:02d}".ljust(4) for e in EXERCISES) + "solved")
    for student in students:
        mine = found[student]
        row = [("x" if mine[e.number].passed else "o") if e.number in mine else "-" for e in EXERCISES]
        print(
            student[:15].ljust(16) + "".join(m.ljust(4) for m in row) + f"{row.count('x')}/{len(EXERCISES)}"
        )
    print("x solved, o tried and not yet, - no file")
    for student in students:
        for number, verdict in sorted(found[student].items()):
            if not verdict.passed:
                print(f"{student} {number:02d}: {verdict.reason[:160]}")
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m workbook exercise",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s\n       [list | check N | watch [N] | hint N | reset N]\n       [--lang en|zh-CN]",
    )
    parser.add_argument(
        "action", nargs="?", default="next", choices=["next", "list", "check", "watch", "hint", "reset"]
    )
    parser.add_argument("number", nargs="?", type=int)
    parser.add_argument("--lang", choices=LANGS, default=None, help="en or zh-CN (default: from the locale)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    lang = args.lang or default_lang()
    if args.action == "list":
        print(listing(lang))
        return 0
    if args.action == "next":
        return next_unsolved(lang)
    if args.number is None and args.action == "watch":
        progress = read_progress()
        args.number = next(
            (e.number for e in EXERCISES if not progress[e.number]["solved"]), EXERCISES[-1].number
        )
    if args.number not in BY_NUMBER:
        numbers = ", ".join(str(n) for n in BY_NUMBER)
        print(f"error: {WORDS[lang]['no_exercise'].format(n=args.number, numbers=numbers)}", file=sys.stderr)
        return 2
    exercise = BY_NUMBER[args.number]
    if args.action == "hint":
        print(next_hint(exercise, lang))
        return 0
    if args.action == "reset":
        print(reset(exercise, lang))
        return 0
    if args.action == "watch":
        return watch(exercise, lang)
    passed, said = check_and_record(exercise, lang)
    print(said)
    return 0 if passed else 1
