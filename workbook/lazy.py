"""The SDK loads on first use, so that `python sNN_x.py --help` needs none of it.

A step reads as a student expects, `import anthropic` at its top. Most of a step's start-up is that
import (about a second of CPU), yet `--help` and a bad flag need none of it. When the running script
is a step, workbook/__init__.py installs `LazyPackages`: an `import` of one of PACKAGES then makes the
module object at once and runs its code on the first attribute anything reads (`anthropic.Anthropic`,
`from anthropic import X`). Until then the module is empty; from then on it is the ordinary module,
the very same object, so nothing behaves differently, only later.

Two details make that true:
- The attributes the import system itself reads (`__spec__`, `__path__`, ...) do not trigger the load:
  they are set before the module runs and never change. So a second `import anthropic` elsewhere stays
  cheap, and `from anthropic._exceptions import AnthropicError` (workbook/errors.py) runs that one
  submodule and what it needs, not the package's whole `__init__`.
- The first read loads the module under a lock: a thread that reads it meanwhile waits for the whole
  module, never sees half of it. A load cut short (a Ctrl-C while the SDK loads) fails again on every
  later read, as `import anthropic` failing at the top would have ended the program: an
  `except anthropic.APIError` the Ctrl-C passes through re-raises it rather than reading half a module.

What else in a step read the SDK while it was only being defined, and no longer does: the type in
a signature (`client: "anthropic.Anthropic"`, in quotes, so Python stores it unread) and
WorkbookError's base class (workbook/errors.py). An `except anthropic.APIError` is read only when an
exception reaches it; step_cli names WorkbookError on its own first, so a flag's mistake is told
before the SDK loads.

`python -m workbook` installs it too (workbook/__main__.py): `check --help`, `serve --help`.
Tests and notebooks import the steps in their own process: they never install this, and import the
SDK eagerly as before. (importlib.util.LazyLoader does the same in spirit, but loads on any attribute,
`__spec__` included, which every later `import` statement reads.)
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import types

PACKAGES = frozenset({"anthropic"})  # only a run needs it; its import is most of a step's start-up
IMPORT_SYSTEM_NAMES = frozenset(  # what the import system reads: set when the module is made, never changed
    {"__name__", "__spec__", "__path__", "__loader__", "__package__", "__file__", "__cached__"}
)


class LazyPackages(importlib.abc.MetaPathFinder):
    """Finds `packages` (top-level names) as the usual path finder would, and hands them out not yet run."""

    def __init__(self, packages=PACKAGES):
        self.packages = packages

    def find_spec(self, name, path=None, target=None):
        if name not in self.packages:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = LoadOnFirstUse(spec.loader)
        return spec


class LoadOnFirstUse(importlib.abc.Loader):
    """Makes the module with the real loader, but runs it only when something first reads from it."""

    def __init__(self, loader):
        self.loader = loader
        self.lock = threading.RLock()  # reentrant: the module's own code may read it while it runs
        self.loading = False
        self.failure = None  # what cut the load short, raised again on every later read

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__spec__.loader = module.__loader__ = self.loader  # what the loaded module will say
        module.__spec__.loader_state = self
        module.__class__ = NotYetLoaded

    def load(self, module) -> None:
        with self.lock:
            if self.failure is not None:  # as an import that failed: the module stays unusable
                raise self.failure
            if type(module) is not NotYetLoaded or self.loading:  # loaded, or this thread is loading it
                return
            self.loading = True
            try:
                self.loader.exec_module(module)
            except BaseException as failure:
                self.failure = failure
                raise
            finally:
                self.loading = False
            module.__class__ = types.ModuleType


class NotYetLoaded(types.ModuleType):
    """A module whose code has not run yet: reading any attribute but the import system's runs it."""

    def __getattribute__(self, name):
        if name not in IMPORT_SYSTEM_NAMES:
            types.ModuleType.__getattribute__(self, "__spec__").loader_state.load(self)
        return types.ModuleType.__getattribute__(self, name)


def load_now(name: str = "anthropic") -> None:
    """Run a deferred package here and now, if it has not run yet (a no-op when it was never deferred).

    A step calls this where its run starts (step_cli.run_step), near the bottom of the call stack,
    rather than leaving the load to the first read, several calls deeper. Why the depth matters: Python
    3.11 keeps each thread's frames in 16 KiB chunks and returns a chunk to the system as soon as the
    call that opened it returns. The SDK's thousands of nested imports go up and down across whichever
    chunk boundary lies in their path; started deeper, they crossed one far more often. In s06, loading
    at the first read cost 7,800 chunk allocations (an mmap and a munmap each, with their page faults)
    where `import anthropic` at a program's top costs 1,800; from run_step, 3,300.
    """
    module = sys.modules.get(name)
    if type(module) is NotYetLoaded:
        module.__spec__.loader_state.load(module)


def install() -> None:
    """From now on, an import of one of PACKAGES that has not happened yet is deferred to its first use."""
    if not any(isinstance(finder, LazyPackages) for finder in sys.meta_path):
        sys.meta_path.insert(0, LazyPackages())
