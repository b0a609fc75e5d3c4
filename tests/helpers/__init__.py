"""Helpers the tests share: builders, clocks, SQL on either backend, fresh PostgreSQL
databases, the dashboard's browser. Fixtures live in conftest.py files, not here."""
