"""Secrets in database URLs: ``redact`` a URL (or text holding one) for messages and logs,
``scrub`` a driver's own message of every secret a URL holds."""

from __future__ import annotations

import re
from urllib.parse import unquote

# key=value pairs whose value is a secret, in a URL's query string or a libpq conninfo string.
_SECRET_PAIR = re.compile(
    r"(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#]*)",
)
CONNINFO = re.compile(r"(?i)(?:^|\s)(?:host|hostaddr|port|dbname|user|password|service)\s*=")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"()]+")
MASK = "***"


def redact(url: str) -> str:
    """A database URL (or any text holding one) fit to print or log: the password of a URL's
    user info — everything between the user's ':' and the last '@', so an unencoded '@' in
    the password is covered — and every ``password=`` / ``sslpassword=`` value (query string,
    or a libpq conninfo string) replaced by ***. The one function every message that names a
    database goes through."""
    text = _SECRET_PAIR.sub(lambda m: m.group(1) + MASK, url)
    scheme, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    creds, at, host = rest.rpartition("@")
    if "/" in creds.split(":", 1)[0]:  # the '@' is in the path, not in user info
        return text
    user, colon, _ = creds.partition(":")
    return f"{scheme}://{user}{':' + MASK if colon else ''}{at}{host}"


def secrets(url: str) -> list[str]:
    """The secret values a database URL or conninfo string holds (as written and
    percent-decoded, longest first), so ``scrub`` can remove them from any text — a driver's
    own error message included."""
    found: set[str] = set()
    for m in _SECRET_PAIR.finditer(url):
        found.add(m.group(2).strip("'"))
    _, sep, rest = url.partition("://")
    if sep and "@" in rest:
        creds = rest.rpartition("@")[0]
        _, colon, password = creds.partition(":")
        if colon:
            found.add(password)
            found.add(unquote(password))
    # Shorter values would mangle ordinary words; the structural redaction covers them.
    return sorted((s for s in found if len(s) >= 4), key=len, reverse=True)


def scrub(text: str, *urls: str | None) -> str:
    """Free ``text`` (a message) with every secret of ``urls`` replaced by ***, and every URL
    or ``password=`` pair in it redacted."""
    for url in urls:
        if url:
            for secret in secrets(url):
                text = text.replace(secret, MASK)
    text = _URL.sub(lambda m: redact(m.group(0)), text)
    return _SECRET_PAIR.sub(lambda m: m.group(1) + MASK, text)
