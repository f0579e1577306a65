"""Plan ids and plan tasks are self-contained: a replica that shares the task key serves the
tasks another replica planned; one with another key refuses them (issue 8 §1)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog

from proxy.app import create_app
from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.plan_tables import many_files
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

TABLE = "/v1/namespaces/replicas/tables/many"
SHARED_KEY = "the-plan-task-key-both-replicas-share"
ANOTHER_KEY = "another-plan-task-key-of-another-deployment"


@contextlib.contextmanager
def replica(workdir: Path, key: str, name: str) -> Iterator[str]:
    """An icegov process on the shared embedded catalog (one warehouse) with ``key`` (and its
    own audit file: one writer per file)."""
    settings = settings_for_tests(workdir, planning={"shard_files": 2, "task_key": key})
    audit = settings.audit.model_copy(update={"file": workdir / f"audit-{name}.log"})
    with serve(create_app(settings.model_copy(update={"audit": audit}))) as url:
        yield url


@pytest.fixture()
def replicas(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    with replica(tmp_path, SHARED_KEY, "first") as first, \
            replica(tmp_path, SHARED_KEY, "second") as second, \
            replica(tmp_path, ANOTHER_KEY, "stranger") as stranger:
        catalog = RestCatalog("admin", uri=first, credential=ADMIN)
        catalog.create_namespace("replicas")
        many_files(catalog, "replicas.many", 5)
        yield first, second, stranger


def test_any_replica_with_the_key_serves_the_tasks(replicas: tuple[str, str, str]) -> None:
    first, second, stranger = replicas
    answer = as_principal(first, ADMIN).post(f"{TABLE}/plan", json={}).json()
    tasks = answer["plan-tasks"]
    assert len(tasks) > 1 and not answer["file-scan-tasks"]
    paths: list[str] = []
    with as_principal(second, ADMIN) as other:
        for task in tasks:
            fetched = other.post(f"{TABLE}/tasks", json={"plan-task": task})
            assert fetched.status_code == 200, fetched.text
            paths += [t["data-file"]["file-path"] for t in fetched.json()["file-scan-tasks"]]
        polled = other.get(f"{TABLE}/plan/{answer['plan-id']}")
        assert polled.status_code == 200 and polled.json()["status"] == "completed"
    assert len(paths) == len(set(paths)) == 5
    with as_principal(stranger, ADMIN) as foreign:
        refused = foreign.post(f"{TABLE}/tasks", json={"plan-task": tasks[0]})
        unknown = foreign.get(f"{TABLE}/plan/{answer['plan-id']}")
    assert_error_model(refused, 400)
    assert_error_model(unknown, 404, "NoSuchPlanIdException")
