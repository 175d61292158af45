"""A fixture's exchanges are judged once: a pass is remembered, keyed by the bytes and the judge.

Checking every request and reply of a fixture against the SDK's types (workbook/contract.py) is most of
what loading one costs: the compiled checks alone are megabytes of code to load, about 20 ms of a
replay's CPU and 10 MB of memory. The same bytes, judged by the same code against the same SDK, always
get the same verdict. So once a fixture's exchanges pass, an empty file says so, in the contract's
private cache folder (workbook/shapes.py):
- in a folder named by the judge: the source of every module in the workbook package, so that any
  change to a rule judges afresh, and the versions of the SDK, of fastjsonschema and of Python, as
  the compiled checks' own key has them;
- named by a digest of the fixture's bytes, and of whether they were read as a fixture or as a
  recording's journal.

Only a pass is remembered. A fixture with a problem is judged every time, so its message always comes
from the code of the day. The folder is the one the compiled checks are run from: whoever could plant
a false pass there could already plant the checks themselves, so a pass file trusts nothing more.
"""

from __future__ import annotations

import hashlib
import shutil
from contextlib import suppress
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # every module in it, hashed: a rule can live in any of them


def passed_before(raw: bytes, form: str) -> bool:
    """Whether these exact bytes, read as `form` ("fixture" or "journal"), passed this judge before."""
    try:
        return (_judge_folder() / _digest(raw, form)).is_file()
    except OSError:
        return False


def remember_pass(raw: bytes, form: str) -> None:
    """Note that these bytes passed: the next load skips the exchanges' check. Best effort: a cache that
    cannot be written (a read-only home) only means the next load judges again.

    The passes of any other judge (older code, another SDK) are removed when this judge's folder is
    made: they would only be read again by that code, which can judge afresh, and so the folder holds
    one judge's passes, not one per edit of the workbook."""
    from workbook.shapes import write_cache

    with suppress(OSError):
        folder = _judge_folder()
        if not folder.is_dir():
            _remove_other_judges(folder)
        write_cache(folder / _digest(raw, form), b"")


def _remove_other_judges(folder: Path) -> None:
    for other in folder.parent.glob("*") if folder.parent.is_dir() else ():
        with suppress(OSError):
            if other.is_dir() and not other.is_symlink():
                shutil.rmtree(other)
            else:
                other.unlink()


def _digest(raw: bytes, form: str) -> str:
    return hashlib.sha256(form.encode() + b"\0" + raw).hexdigest()


def _judge_folder() -> Path:
    from workbook.shapes import cache_file

    return cache_file("passed").parent / "passed" / _judge().hex()[:32]


@cache
def _judge() -> bytes:
    """What a verdict depends on besides the fixture: the workbook's code and the compiled checks' key."""
    from workbook.shapes import cache_file

    judge = hashlib.sha256(cache_file("passed").name.encode())  # the SDK's, fastjsonschema's, Python's
    for module in sorted(PACKAGE.glob("*.py")):
        judge.update(module.name.encode() + b"\0" + module.read_bytes())
    return judge.digest()
