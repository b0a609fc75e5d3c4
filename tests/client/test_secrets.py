"""A database password never appears in anything errands prints or raises: every CLI
command's error paths and banners, and exceptions' str(), with password-bearing URLs of every
shape (user info, an unencoded '@', a query string, a libpq conninfo string)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import errands
from errands.backends import redact, scrub, secrets
from errands.cli import main
from helpers.support import is_postgres

PASSWORD = "Sup3rS3cretPw"


def bad_urls() -> list[tuple[str, str]]:
    """(id, url): unreachable or wrong, each carrying PASSWORD somewhere."""
    pg = os.environ.get("ERRANDS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/x")
    server = pg.split("://", 1)[1].split("@")[-1].split("/")[0]  # host:port of the test server
    return [
        ("closed port", f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"),
        ("wrong database", f"postgresql://postgres:{PASSWORD}@{server}/no_such_db_errands"),
        ("unencoded @", f"postgresql://u:{PASSWORD[:5]}@{PASSWORD[5:]}@127.0.0.1:1/db"),
        ("encoded @", f"postgresql://u:{PASSWORD[:5]}%40{PASSWORD[5:]}@127.0.0.1:1/db"),
        ("query string", f"postgresql://u@127.0.0.1:1/db?password={PASSWORD}&sslmode=disable"),
        ("conninfo", f"host=127.0.0.1 port=1 dbname=db password={PASSWORD}"),
        ("conninfo quoted", f"host=127.0.0.1 port=1 password='{PASSWORD} x' dbname=db"),
    ]


URLS = bad_urls()
COMMANDS = [
    ["enqueue", "t"],
    ["jobs"],
    ["show", "1"],
    ["retry", "1"],
    ["cancel", "1"],
    ["retry", "--status", "failed", "--yes"],
    ["stats"],
    ["errors"],
    ["prune"],
    ["vacuum"],
    ["periodic"],
    ["check"],
    ["metrics"],
    ["graduate", "--to", "postgresql://u@127.0.0.1:1/db"],
    ["dashboard", "--port", "0"],
]


def _clean(text: str) -> None:
    for secret in (PASSWORD, PASSWORD[:5] + "@" + PASSWORD[5:], PASSWORD[5:]):
        assert secret not in text, text


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a conninfo taken for a file name would land here
    monkeypatch.delenv("ERRANDS_DB", raising=False)


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
@pytest.mark.parametrize(("kind", "url"), URLS, ids=[u[0] for u in URLS])
def test_no_cli_command_prints_the_password(
    command: list[str],
    kind: str,
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for how in ("--db", "ERRANDS_DB"):
        if how == "--db":
            code = main([*command, "--db", url])
        else:
            monkeypatch.setenv("ERRANDS_DB", url)
            code = main(command)
            monkeypatch.delenv("ERRANDS_DB")
        out, err = capsys.readouterr()
        assert code != 0, (how, out, err)
        _clean(out + err)
        assert err.strip().splitlines()[-1].startswith("errands"), err
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after a conninfo string


def test_graduate_with_a_postgres_source_names_it_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"
    code = main(["graduate", "--db", url, "--to", url])
    _, err = capsys.readouterr()
    assert code == 2  # bad usage: graduate copies a SQLite file to PostgreSQL
    assert "a PostgreSQL URL" in err and "u:***@127.0.0.1:1/db" in err
    _clean(err)
    code = main(["graduate", "--to", f"mysql://u:{PASSWORD}@h/db"])
    _, err = capsys.readouterr()
    assert code == 2 and "--to must be a postgresql:// URL" in err
    _clean(err)


@pytest.mark.parametrize(("kind", "url"), URLS, ids=[u[0] for u in URLS])
def test_exceptions_never_carry_the_password(kind: str, url: str) -> None:
    with pytest.raises(errands.ErrandsError) as raised:
        errands.Queue(url)
    _clean(str(raised.value))
    _clean(repr(raised.value))
    assert "\n" not in str(raised.value)


def test_an_unencoded_at_sign_is_refused_with_the_way_out() -> None:
    with pytest.raises(errands.ConfigurationError, match="%40") as raised:
        errands.Queue("postgresql://u:p@ssword@127.0.0.1:1/db")
    assert "u:***@127.0.0.1:1/db" in str(raised.value)


def test_a_conninfo_string_is_not_taken_for_a_file_name(tmp_path: Path) -> None:
    with pytest.raises(errands.ConfigurationError, match="libpq connection string"):
        errands.Queue(f"host=localhost password={PASSWORD}")
    assert list(tmp_path.iterdir()) == []


def test_the_worker_banner_and_errors_hide_the_password(tmp_path: Path, db_url: str) -> None:
    """A real worker process: its banner names the database without the password, and so
    does its --db mismatch error."""
    if is_postgres(db_url):
        scheme, rest = db_url.split("://", 1)
        user_host = rest.split("@", 1)
        shown = f"{scheme}://{user_host[0]}:{PASSWORD}@{user_host[1]}"  # trust auth ignores it
    else:
        shown = db_url
    (tmp_path / "pw_app.py").write_text(
        textwrap.dedent(
            """
            import os, errands
            q = errands.Queue(os.environ["APP_DB"])

            @q.task
            def t() -> None: ...
            """
        )
    )
    env = {**os.environ, "APP_DB": shown}
    base = [sys.executable, "-m", "errands", "worker", "--app", "pw_app"]
    r = subprocess.run(
        [*base, "--burst"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "errands worker: " in r.stderr
    _clean(r.stdout + r.stderr)
    other = f"postgresql://u:{PASSWORD}@127.0.0.1:1/other"
    r = subprocess.run(
        [*base, "--db", other], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "differs from the database" in r.stderr
    _clean(r.stdout + r.stderr)


def test_repr_and_display_url_hide_the_password() -> None:
    url = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db?password={PASSWORD}"
    assert redact(url) == "postgresql://u:***@127.0.0.1:1/db?password=***"
    assert redact(f"host=h password={PASSWORD} dbname=d") == "host=h password=*** dbname=d"
    assert redact("sqlite:////srv/a@b.db") == "sqlite:////srv/a@b.db"  # '@' in a path: kept
    assert redact("app.db") == "app.db"
    assert PASSWORD in secrets(url)
    said = f'connection to "{PASSWORD}" failed'
    assert scrub(said, url) == 'connection to "***" failed'
