"""Shared fixtures: real servers on loopback ports, one per backing catalog kind."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.app import create_app
from tests.support.servers import serve
from tests.support.settings import settings_for_tests

BACKENDS = ("embedded", "reference")


@contextlib.contextmanager
def proxy_for(backend: str, workdir: Path) -> Iterator[str]:
    """An icegov proxy on a loopback port in front of ``backend``; yields its URL."""
    if backend == "embedded":
        with serve(create_app(settings_for_tests(workdir))) as url:
            yield url
        return
    from tests.support.reference_catalog import reference_catalog

    with reference_catalog(workdir) as catalog_uri, \
            serve(create_app(settings_for_tests(workdir, catalog_uri=catalog_uri))) as url:
        yield url


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Which backing catalog the proxy fronts: icegov's embedded one or Iceberg's reference one."""
    return str(request.param)


@pytest.fixture(scope="session")
def proxy_url(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The proxy in front of the current backend, for the whole test session."""
    with proxy_for(backend, tmp_path_factory.mktemp(backend)) as url:
        yield url
