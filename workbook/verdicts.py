"""A fixture's exchanges are judged once: a pass is remembered, keyed by the bytes and the judge.

Checking every request and reply of a fixture against the SDK's types (workbook/contract.py) is most of
what loading one costs: the compiled checks alone are megabytes of code to load, about 20 ms of a
replay's CPU and 10 MB of memory. The same bytes, judged by the same code against the same SDK, always
get the same verdict. So once a fixture's exchanges pass, an empty file named by a digest says so, in
the contract's private cache folder (workbook/shapes.py). The digest covers:
- the fixture's bytes, and whether they were read as a fixture or as a recording's journal;
- the source of every module in the workbook package, so that any change to a rule judges afresh;
- the versions of the SDK, of fastjsonschema and of Python, as the compiled checks' own key does.

Only a pass is remembered. A fixture with a problem is judged every time, so its message always comes
from the code of the day. The folder is the one the compiled checks are run from: whoever could plant
a false pass there could already plant the checks themselves, so a pass file trusts nothing more.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # every module in it, hashed: a rule can live in any of them


def passed_before(raw: bytes, form: str) -> bool:
    """Whether these exact bytes, read as `form` ("fixture" or "journal"), passed this judge before."""
    try:
        return _pass_file(raw, form).is_file()
    except OSError:
        return False


def remember_pass(raw: bytes, form: str) -> None:
    """Note that these bytes passed: the next load skips the exchanges' check. Best effort: a cache that
    cannot be written (a read-only home) only means the next load judges again."""
    from workbook.shapes import write_cache

    write_cache(_pass_file(raw, form), b"")


def _pass_file(raw: bytes, form: str) -> Path:
    from workbook.shapes import cache_file

    digest = hashlib.sha256(_judge() + form.encode() + b"\0" + raw).hexdigest()
    return cache_file("passed").parent / "passed" / digest


@cache
def _judge() -> bytes:
    """What a verdict depends on besides the fixture: the workbook's code and the compiled checks' key."""
    from workbook.shapes import cache_file

    judge = hashlib.sha256(cache_file("passed").name.encode())  # the SDK's, fastjsonschema's, Python's
    for module in sorted(PACKAGE.glob("*.py")):
        judge.update(module.name.encode() + b"\0" + module.read_bytes())
    return judge.digest()
