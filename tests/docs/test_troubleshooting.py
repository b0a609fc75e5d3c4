"""docs/troubleshooting.md names every error a user can meet, and only errors that exist."""

from __future__ import annotations

import ast
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
        # JobError and Snooze are raised by handlers, not by errands.
        assert issubclass(classes[name], errands.ErrandsError) or name in {"JobError", "Snooze"}


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


# -- every message the doc quotes is one the code can print ---------------------------------

# A quoted message is literal text with `…` where the doc leaves words out, and values (a
# placeholder such as PATH, `delay`, `31536000000`) where the code puts them: each part between
# the `…` must be part of one rendering of one string the package builds (a literal, or an
# f-string whose fields stand for the values), mostly from its literal text, so a reworded
# message fails here until the doc follows.
FIELD = re.compile(r"(?:[^\s…]+(?: [^\s…]+)?)?")
# Messages argparse itself prints (the CLI prefixes them with `errands: `).
FROM_ARGPARSE = {"argument …"}


def _templates() -> list[list[str]]:
    """Every string the package's source builds, as its literal parts (fields between)."""
    found: list[list[str]] = []
    for path in (ROOT / "src" / "errands").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append([node.value])
            elif isinstance(node, ast.JoinedStr):
                parts = [""]
                for value in node.values:
                    if isinstance(value, ast.Constant):
                        parts[-1] += str(value.value)
                    else:
                        parts.append("")
                found.append(parts)
    return found


def _rest(text: str, parts: list[str], idx: int) -> int:
    """How many characters of ``text`` literal text renders at best, when ``text`` starts in a
    field followed by ``parts[idx:]`` (possibly cut short); -1 if it cannot."""
    best = -1
    for n in range(len(text) + 1):
        if not FIELD.fullmatch(text[:n]):
            continue
        tail, literal = text[n:], parts[idx]
        if not tail or literal.startswith(tail):
            best = max(best, len(tail))
        elif idx + 1 < len(parts) and tail.startswith(literal):
            more = _rest(tail[len(literal) :], parts, idx + 1)
            if more >= 0:
                best = max(best, len(literal) + more)
    return best


def _renders(quote: str, parts: list[str]) -> bool:
    """Is ``quote`` part of one rendering of ``parts``, mostly from its literal text (so a
    template of short words between fields does not pass for any sentence)?"""
    need = len(re.sub(r"[-\d]+", "", quote)) / 2  # numbers are values
    for i, literal in enumerate(parts):
        if quote in literal:
            return True
        if i + 1 == len(parts):
            break
        for k in range(len(literal) + 1):
            head = literal[k:]
            if quote.startswith(head):
                more = _rest(quote[len(head) :], parts, i + 1)
                if more >= 0 and len(head) + more >= need:
                    return True
    return False


def _printed(quote: str, parts: list[str]) -> bool:
    pieces = [p.strip() for p in quote.split("…") if p.strip()]
    # a piece of one or two words alone (`run_at …`) may be a value the code fills in
    return all(FIELD.fullmatch(piece) or _renders(piece, parts) for piece in pieces)


def _quoted_messages() -> list[str]:
    quotes: list[str] = []
    in_messages = False
    for line in DOC.splitlines():
        if line.startswith("| Message says"):
            in_messages = True
        elif not line.startswith("|"):
            in_messages = False
        elif in_messages and not line.startswith("| ---"):
            quotes += re.findall(r"`([^`]+)`", line.split("|")[1])
    command_line = DOC.split("## Command line", 1)[1]
    quotes += re.findall(r"`errands: ([^`]+)`", command_line)
    return [q for q in quotes if q not in FROM_ARGPARSE]


def test_every_message_the_doc_quotes_is_one_the_code_prints() -> None:
    quotes = _quoted_messages()
    assert len(quotes) > 30 and "no queue database at PATH (from --db)" in quotes
    templates = _templates()
    missing = [q for q in quotes if not any(_printed(q, t) for t in templates)]
    assert missing == [], "troubleshooting.md quotes messages the code no longer prints"


def test_the_message_check_tells_a_reworded_message() -> None:
    template = ["no queue database at ", " (from ", "); create it by starting"]
    assert _printed("no queue database at PATH (from --db)", template)
    assert _printed("database at … (from --db); … starting", template)
    assert not _printed("no database at PATH (from --db)", template)
    assert not _printed("no queue database at PATH (via --db)", template)
    assert not _printed("no queue database at … (from --db); make it", template)
    # a template of short words between fields does not pass for any sentence
    assert not _printed("no database at PATH (from --db)", ["The job: #", " ", " ", " → ", ""])
