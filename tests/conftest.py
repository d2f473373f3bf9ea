"""Shared fixtures. Every Report built in-process is validated against the schema."""
from __future__ import annotations

import pytest

from support import validate_report

# The conda fixture builder (fixtures/condafixtures.py) provides the session-scoped `conda_world`.
pytest_plugins = ["condafixtures"]


@pytest.fixture(autouse=True)
def _validate_every_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Report rendered or returned by the engine in a test must obey the schema."""
    from envdoctor import engine

    original = engine.assemble_report

    def checked(*args, **kwargs):
        report = original(*args, **kwargs)
        validate_report(report.to_dict())
        return report

    monkeypatch.setattr(engine, "assemble_report", checked)
