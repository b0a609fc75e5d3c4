"""The mounting recipes of docs/dashboard.md, run as written: FastAPI and Django (ASGI), each
with the token and with the host application's own auth, on both backends."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from helpers.support import get_job
from helpers.web import populate

DOC = Path(__file__).resolve().parents[2] / "docs" / "dashboard.md"
TOKEN = "mount-token"
ADMIN_KEY = "admin-key"
JSON = {"content-type": "application/json"}


def recipe(name: str) -> str:
    match = re.search(rf"<!-- recipe: {name} -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"docs/dashboard.md has no recipe {name!r}"
    return match.group(1)


def run_recipe(name: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": f"recipe_{name.replace('-', '_')}"}
    exec(compile(recipe(name), f"docs/dashboard.md:{name}", "exec"), ns)
    return ns


@pytest.fixture
def env(db_url: str, queue: errands.Queue, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("ERRANDS_DB", db_url)
    monkeypatch.setenv("ERRANDS_DASHBOARD_TOKEN", TOKEN)
    monkeypatch.setenv("ADMIN_KEY", ADMIN_KEY)
    return populate(queue)


def close_queue(ns: dict[str, Any]) -> None:
    for value in ns.values():
        if isinstance(value, errands.Queue):
            value.close()


def check_token_mount(c: TestClient, jobs: dict[str, Any], q: errands.Queue) -> None:
    assert c.get("/errands/api/admin/stats").status_code == 401
    assert c.get("/errands/healthz").json() == {"status": "ok"}
    login = c.get("/errands/")
    assert login.status_code == 303
    assert login.headers["location"].endswith("/errands/login?next=%2Ferrands%2F")
    r = c.post("/errands/login", data={"token": TOKEN, "next": "/errands/jobs?status=failed"})
    assert r.status_code == 303  # back to the page asked for, inside the mount
    assert r.headers["location"] == "/errands/jobs?status=failed"
    assert "path=/errands/" in r.headers["set-cookie"].lower()
    page = c.get("/errands/")
    assert page.status_code == 200 and 'href="http://testserver/errands/jobs"' in page.text
    failed = jobs["failed"][0]
    bearer = {"authorization": f"Bearer {TOKEN}", **JSON}
    assert c.post(f"/errands/api/admin/jobs/{failed}/retry", headers=bearer).status_code == 200
    assert q.events(failed)[-1].actor == "api"


def test_fastapi_with_the_token(env: dict[str, Any], queue: errands.Queue) -> None:
    ns = run_recipe("fastapi-token")
    try:
        check_token_mount(TestClient(ns["app"], follow_redirects=False), env, queue)
    finally:
        close_queue(ns)


def test_fastapi_with_its_own_auth(env: dict[str, Any], queue: errands.Queue) -> None:
    ns = run_recipe("fastapi-auth")
    try:
        c = TestClient(ns["app"], follow_redirects=False)
        assert c.get("/errands/api/admin/stats").status_code == 401
        assert c.get("/errands/").status_code == 401
        assert c.get("/admin/ping").status_code == 401
        admin = {"x-admin-key": ADMIN_KEY}
        assert c.get("/admin/ping", headers=admin).json() == {"ok": True}
        stats = c.get("/errands/api/admin/stats", headers=admin).json()
        assert stats["counts"]["failed"] == 3
        failed = env["failed"][0]
        r = c.post(f"/errands/api/admin/jobs/{failed}/retry", headers={**admin, **JSON})
        assert r.status_code == 200 and get_job(queue, failed).status == "queued"
    finally:
        close_queue(ns)


@pytest.fixture(scope="module")
def django_site(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A configured Django (auth, sessions) on its own SQLite file, once per test run."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="test-only",
            ALLOWED_HOSTS=["testserver"],
            ROOT_URLCONF=__name__,
            INSTALLED_APPS=[
                "django.contrib.auth",
                "django.contrib.contenttypes",
                "django.contrib.sessions",
            ],
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.sqlite3",
                    "NAME": str(tmp_path_factory.mktemp("django") / "site.db"),
                }
            },
            USE_TZ=True,
        )
        django.setup()
        call_command("migrate", verbosity=0)
    return settings


urlpatterns: list[Any] = []  # the Django site's URLconf: every non-dashboard path is a 404


def test_django_with_the_token(django_site: Any, env: dict[str, Any], queue: errands.Queue) -> None:
    ns = run_recipe("django-token")
    try:
        c = TestClient(ns["application"], follow_redirects=False)
        check_token_mount(c, env, queue)
        assert c.get("/not-errands/").status_code == 404  # Django answered
        assert "content-security-policy" not in c.get("/not-errands/").headers
    finally:
        close_queue(ns)


def test_django_with_its_own_login(
    django_site: Any, env: dict[str, Any], queue: errands.Queue
) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    def session_of(username: str, staff: bool) -> str:
        user = User.objects.create_user(username, password="x" * 12, is_staff=staff)
        client = Client()
        client.force_login(user)
        return str(client.cookies[django_site.SESSION_COOKIE_NAME].value)

    staff = session_of(f"ops-{id(env)}", True)
    visitor = session_of(f"visitor-{id(env)}", False)
    ns = run_recipe("django-auth")
    try:
        app = ns["application"]
        name = django_site.SESSION_COOKIE_NAME
        assert TestClient(app).get("/errands/api/admin/stats").status_code == 401
        c = TestClient(app, cookies={name: visitor})
        assert c.get("/errands/api/admin/stats").status_code == 401
        c = TestClient(app, cookies={name: staff}, follow_redirects=False)
        assert c.get("/errands/api/admin/stats").json()["counts"]["failed"] == 3
        page = c.get(f"/errands/jobs/{env['failed'][0]}")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf
        r = c.post(f"/errands/jobs/{env['failed'][0]}/retry", data={"csrf": csrf.group(1)})
        assert r.status_code == 303
        assert get_job(queue, env["failed"][0]).status == "queued"
    finally:
        close_queue(ns)
