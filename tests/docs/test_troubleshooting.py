"""docs/troubleshooting.md names every error a user can meet, and only errors that exist."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import errands
import errands.cli.graduate.copy
import errands.errors

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "troubleshooting.md").read_text()
SRC = "\n".join(p.read_text() for p in (ROOT / "src" / "errands").rglob("*.py"))

# Named in the doc, but built on a parallel branch (issue #13's wait()). Each must be removed
# from here once it is merged: the test below fails as soon as the code has it, so this list
# cannot go stale.
CODE = re.compile(r"`([A-Z][A-Z0-9_]*:[A-Za-z0-9_<>]+)`")
HEADING = re.compile(r"^### `(\w+)`$", re.MULTILINE)


def _error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in (errands.errors, errands.cli.graduate.copy):
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Exception)
                and obj.__module__ == module.__name__
            ):
                found[name] = obj
    return found


def test_every_error_class_in_errors_py_has_a_section() -> None:
    documented = set(HEADING.findall(DOC))
    defined = {name for name, cls in _error_classes().items() if cls.__module__ == "errands.errors"}
    assert defined - documented == set(), "error classes missing from troubleshooting.md"


def test_every_section_names_an_error_class_that_exists() -> None:
    classes = _error_classes()
    for name in HEADING.findall(DOC):
        assert name in classes, f"troubleshooting.md documents {name}, which errands lacks"
        assert issubclass(classes[name], errands.ErrandsError) or name == "JobError"


def test_every_error_code_named_in_the_doc_is_in_the_code() -> None:
    for code in set(CODE.findall(DOC)):
        probe = "INTERNAL:" if code == "INTERNAL:<ExceptionClass>" else code
        assert probe in SRC, f"troubleshooting.md names {code}, which no source file uses"


def test_every_error_code_errands_sets_is_in_the_doc() -> None:
    documented = set(CODE.findall(DOC))
    # Codes errands itself assigns: quoted CATEGORY:SUBCATEGORY literals in the package.
    used = set(re.findall(r"[\"']([A-Z][A-Z0-9_]*:[A-Z][A-Z0-9_]*)[\"']", SRC))
    examples = {"PAYMENT:CARD_DECLINED"}  # a docstring's example of a user's own code
    assert used - examples - documented == set()
