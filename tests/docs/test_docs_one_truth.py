"""What the docs say about task options across processes, graduation and schedules (issue
#21), checked against the code: the tables, the cache time, the defaults, the commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from errands.backends import sql
from errands.cli import main
from errands.client.declared import TTL
from errands.tasks import TaskOptions

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
POSTGRES = (ROOT / "docs" / "postgres.md").read_text()
RECIPES = (ROOT / "docs" / "recipes.md").read_text()
CLI = (ROOT / "docs" / "cli.md").read_text()


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_tables_of_migration_7_are_in_the_documented_schema() -> None:
    (script,) = [text for version, text in sql.migrations("sqlite") if version == 7]
    created = set(re.findall(r"CREATE TABLE (\w+)", script))
    assert created == {"task_types", "errands_meta"}
    intro = flat(OPERATIONS.split("| Command |")[0])
    sharing = flat(OPERATIONS.split("## Sharing the application's SQLite file")[1])
    for table in created:
        assert f"`{table}`" in intro and f"`{table}`" in sharing, table


def test_the_stated_cache_time_and_defaults_are_the_codes() -> None:
    text = flat(OPERATIONS)
    assert f"at most once every {TTL:.0f} seconds" in text
    assert f"within {TTL:.0f} s of the worker's start" in text
    assert f"at most once per {TTL:.0f} s" in flat(RECIPES)
    assert f"at most every {TTL:.0f} seconds on enqueue" in flat(POSTGRES)
    d = TaskOptions()
    stated = f"queue `{d.queue}`, priority {d.priority}, {d.max_attempts} attempts"
    assert stated in text and stated in flat(RECIPES)


@pytest.mark.parametrize(
    "argv",
    [
        ["graduate", "--help"],
        ["reopen", "--help"],
        ["periodic", "--help"],
    ],
)
def test_the_documented_commands_exist(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    if argv[0] == "graduate":
        assert "--ignore-live-workers" in out and "--ignore-live-workers" in POSTGRES
    if argv[0] == "periodic":
        assert "remove" in out and "errands periodic remove NAME" in OPERATIONS
    if argv[0] == "reopen":
        assert "errands reopen --db app.db" in POSTGRES and "errands reopen" in CLI
