"""A stranger's regular expression, searched for with bounds on its time and memory, compile included.

The `regex` module stops a search at a timeout, but not a compile, and it compiles a fixed repeat by
writing it out: `a{10000000}` takes 2.7 GB, `a{100000000}` is a MemoryError, and nested repeats grow
as their product. A model (or a stranger's fixture) chooses the pattern, and grep runs unasked.

So grep() searches in this process only for a pattern that is plainly small (`simple`: Python's own
parser reads it, it has no `{` and no repeat inside a repeat), where the search's own timeout bounds
it. Any other pattern is compiled and searched in a child process: forked, with RLIMIT_AS at what it
already had plus MEMORY_BYTES, and RLIMIT_CPU at its seconds (of CPU: a busy machine does not cut a
fair search short), killed by the kernel past either. A fork costs this process
about 20 ms (a new interpreter with `regex` would take 150 ms), so the usual patterns do not pay it.
A pattern that cannot be compiled or searched within the bounds is a PatternError (a ValueError),
one line for an is_error result; the parent never holds more than the matches (`max_matches` lines).

The child uses only what it was forked with: its own pipe, the `regex` module (imported by the parent
before the fork) and new files, so no lock another thread held at the fork is ever waited on.
"""

from __future__ import annotations

import json
import math
import os
import resource
import select
import signal
import time
import warnings
from pathlib import Path

try:
    from re import _parser  # Python 3.11+
except ImportError:  # Python 3.10
    import sre_parse as _parser

from workbook.scrub import scrub_secrets

import psutil

SECONDS = 5.0  # of CPU, for a whole search, compile included
WALL_SECONDS = 60.0  # a child that has not answered by then (blocked on a FIFO?) is killed
MEMORY_BYTES = 512 << 20  # what the compile and the search may add to the process
MAX_FILE_BYTES = 10_000_000  # larger files are not searched
READ_BYTES = 1 << 16


class PatternError(ValueError):
    """A pattern that is not a regular expression, or does not compile or search within the bounds."""


def grep(
    pattern: str,
    files: list[Path],
    workspace: Path,
    max_matches: int = 500,
    seconds: float = SECONDS,
    line_chars: int = 1000,
) -> list[str]:
    """`path:line: text` for each line of `files` (paths shown relative to `workspace`) that
    `pattern` matches, at most `max_matches`, each text cut to `line_chars`; the compile and the
    search bounded by `seconds` and MEMORY_BYTES (see the module)."""
    search = (pattern, files, workspace, max_matches, seconds, line_chars)
    import regex  # the child compiles with it: imported here, before the fork, not in the child

    if simple(pattern) or not hasattr(os, "fork"):  # (no fork, on Windows: the timeout is all there is)
        return scrub_secrets(_search(regex, *search))
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns of fork in a threaded process: see the module
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _child(write_end, regex, search)
    os.close(write_end)
    answer, status = None, 0
    try:
        answer = _read(read_end, time.monotonic() + WALL_SECONDS)
    finally:  # stuck (a FIFO?), or a Ctrl-C: the child goes too, and is reaped
        if answer is None:
            os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
    out_of_time = answer is None or os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU
    if out_of_time:
        raise PatternError(f"{shown(pattern)} is not a regular expression that ends in time ({seconds:g} s)")
    try:
        result = json.loads(answer)
    except ValueError:  # the child died mid-answer (the kernel killed it): no answer
        result = {"error": too_large(pattern)}
    if "error" in result:
        raise PatternError(result["error"])
    return scrub_secrets(result["hits"])  # a line of a .env, say: no key the process holds


REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
SIMPLE_CHARS = 1000  # a longer pattern goes to the child, whatever it holds


def simple(pattern: str) -> bool:
    """Whether `pattern` is safe to compile and search in this process: no `{` (a fixed repeat, which
    `regex` writes out, or its fuzzy matching), Python's own parser reads it, and no repeat holds
    another (what backtracks for ever). Anything else may be large: the child searches for it."""
    if "{" in pattern or len(pattern) > SIMPLE_CHARS:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # re's FutureWarnings about sets that `regex` reads otherwise
            tree = _parser.parse(pattern)
    except Exception:  # anything re's parser refuses (regex's own syntax, a deep nesting): the child's
        return False
    return not _nested_repeat(tree, False)


def _nested_repeat(node, inside: bool) -> bool:
    """Whether a repeat sits inside another, anywhere below `node` (a parsed pattern, or a part of one)."""
    if isinstance(node, _parser.SubPattern):
        node = node.data
    if not isinstance(node, list | tuple):
        return False
    for item in node:
        if isinstance(item, tuple) and len(item) == 2 and str(item[0]) in REPEATS:
            if inside or _nested_repeat(item[1], True):
                return True
        elif _nested_repeat(item, inside):
            return True
    return False


def shown(pattern: str) -> str:
    return repr(pattern[:80]) + ("…" if len(pattern) > 80 else "")


def too_large(pattern: str) -> str:
    return (
        f"{shown(pattern)} is too large a regular expression: it needs more than {MEMORY_BYTES >> 20} MB "
        "to compile and search (a long fixed repeat, or repeats nested); write it shorter"
    )


def _child(out: int, regex, search: tuple) -> None:
    """The forked child: bound itself, search, write one JSON answer, exit without the parent's clean-up."""
    try:
        _bound(search[4])
        answer = {"hits": _search(regex, *search)}
    except MemoryError:
        answer = {"error": too_large(search[0])}
    except PatternError as err:
        answer = {"error": str(err)}
    except BaseException as err:  # whatever else: one line, never a traceback in the child
        answer = {"error": f"{shown(search[0])} could not be searched for ({type(err).__name__})"}
    try:
        data = json.dumps(answer).encode()
        while data:
            data = data[os.write(out, data) :]
    finally:
        os._exit(0)


def _bound(seconds: float) -> None:
    """RLIMIT_AS: the address space the child has now, plus MEMORY_BYTES; RLIMIT_CPU: `seconds` of CPU
    (whole ones, and one more), so that a compile, which no timeout reaches, ends too, however busy
    the machine is (the CPU it used, not the time that passed)."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    cpu = math.ceil(seconds) + 1
    if hard != resource.RLIM_INFINITY:
        cpu = min(cpu, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))
    limit = psutil.Process().memory_info().vms + MEMORY_BYTES
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _search(regex, pattern, files, workspace, max_matches, seconds, line_chars) -> list[str]:
    deadline = time.process_time() + seconds
    try:
        compiled = regex.compile(pattern)
    except regex.error as err:
        raise PatternError(f"{shown(pattern)} is not a regular expression: {err}") from None
    hits = []
    for file in files:
        try:
            if file.stat().st_size > MAX_FILE_BYTES:
                continue
            lines = file.read_text(errors="replace").splitlines()
        except OSError:
            continue  # gone, or a link loop: nothing to search
        for n, line in enumerate(lines, 1):
            try:
                found = compiled.search(line, timeout=max(0.0, deadline - time.process_time()))
            except TimeoutError:
                raise PatternError(
                    f"{shown(pattern)} is not a regular expression that ends in time ({seconds:g} s)"
                ) from None
            if found:
                hits.append(f"{file.relative_to(workspace)}:{n}: {line[:line_chars]}")
                if len(hits) == max_matches:
                    return hits
    return hits


def _read(fd: int, deadline: float) -> bytes | None:
    """All the child writes, until it closes the pipe; None if that takes past `deadline`."""
    chunks = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, READ_BYTES)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)
