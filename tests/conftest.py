"""Shared fixtures: real servers on loopback ports, one per backing catalog kind."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.app import create_app
from tests.support import ocsf_watch
from tests.support.servers import serve
from tests.support.settings import settings_for_tests

BACKENDS = ("embedded", "reference")


@dataclass(frozen=True)
class RunningProxy:
    """A proxy serving on a loopback port, the directory holding its audit log, and the URI of
    its backing catalog when that is a server of its own (the reference catalog: a control
    reads it directly, unguarded; None for the embedded one)."""

    url: str
    workdir: Path
    backing_url: str | None = None

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"


@contextlib.contextmanager
def proxy_for(backend: str, workdir: Path, **settings: Any) -> Iterator[RunningProxy]:
    """An icegov proxy on a loopback port in front of ``backend``."""
    if backend == "embedded":
        with serve(create_app(settings_for_tests(workdir, **settings))) as url:
            yield RunningProxy(url, workdir)
        return
    from tests.support.reference_catalog import reference_catalog

    with reference_catalog(workdir) as catalog_uri:
        app = create_app(settings_for_tests(workdir, catalog_uri=catalog_uri, **settings))
        with serve(app) as url:
            yield RunningProxy(url, workdir, catalog_uri)


@pytest.fixture(autouse=True)
def ocsf_events_validate() -> Iterator[None]:
    """After each test, every OCSF event icegov wrote during it validates against the OCSF JSON
    Schema of its class (``tests.support.ocsf_watch``)."""
    yield
    ocsf_watch.check_written()


@pytest.fixture(scope="session", autouse=True)
def ocsf_events_validate_at_the_end() -> Iterator[None]:
    """What session-wide proxies wrote after the last test, validated once they stopped."""
    yield
    ocsf_watch.check_written()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Which backing catalog the proxy fronts: icegov's embedded one or Iceberg's reference one."""
    return str(request.param)


@pytest.fixture(scope="session")
def proxy(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    """The proxy in front of the current backend, for the whole test session."""
    with proxy_for(backend, tmp_path_factory.mktemp(backend)) as running:
        yield running


@pytest.fixture(scope="session")
def proxy_url(proxy: RunningProxy) -> str:
    return proxy.url
