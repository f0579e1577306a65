"""Namespaces whose levels pass through a table are not namespaces.

A catalog that keeps tables and namespaces as directories (Iceberg's ``HadoopCatalog``: a table
is the directory ``demo/victim``, a namespace the directory path of its levels) takes
``demo.victim.data`` for a namespace inside the table ``demo.victim``: it would list the table's
partition directories as namespaces, and create (and, on drop, recursively delete) a table in
the table's own data directory. The policy rules ``icegov.demo.victim`` and what lies beneath it
separately, so such a name must never reach the backing: a request naming a namespace one of
whose levels, after the first, is a table in the levels before it answers 404, as a namespace
that does not exist. Asked only for namespaces of two levels or more, once the gate has allowed
the request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import httpx

from proxy.backing.tables import table_path
from proxy.errors import BackingUnavailable, NoSuchNamespace, NoSuchTable, NotFound
from proxy.inbound import InboundRequest
from proxy.resources import Resource

Headers = tuple[tuple[bytes, bytes], ...]
Fetch = Callable[[bytes, bytes, Headers], Awaitable[httpx.Response]]


class NamespacePaths:
    """Refuses namespaces that pass through a table of the backing catalog."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch

    async def check(self, inbound: InboundRequest, resources: Iterable[Resource]) -> None:
        """404 when a namespace of ``resources`` passes through a table: ``NoSuchTable`` for a
        table or view the request reads or changes (Java clients, Spark among them, look for a
        metadata table such as ``db.t.snapshots`` only after a ``NoSuchTableException``),
        ``NoSuchNamespace`` otherwise."""
        asked: set[Resource] = set()
        for resource in resources:
            for table in _tables_on_the_way(resource):
                if table in asked:
                    continue
                asked.add(table)
                answer = await self._fetch(table_path(inbound.route.prefix, table), b"",
                                           inbound.headers)
                if _is_table(answer):
                    raise _missing(inbound, resource)


def _is_table(answer: httpx.Response) -> bool:
    """Whether ``answer`` may be a table's: only a 404, or a 200 that is no LoadTableResult
    (no ``metadata`` object), says there is none; a server error says nothing (503)."""
    if answer.status_code == 404:
        return False
    if answer.status_code >= 500:
        raise BackingUnavailable("the backing catalog could not say whether a namespace level "
                                 "is a table")
    if answer.status_code != 200:
        return True
    try:
        loaded = answer.json()
    except ValueError:
        return False
    return isinstance(loaded, dict) and isinstance(loaded.get("metadata"), dict)


CREATES = frozenset({"create_table", "register_table", "create_view", "register_view"})
"""Endpoints whose table does not exist yet: what is missing is its namespace."""


def _missing(inbound: InboundRequest, resource: Resource) -> NotFound:
    if resource.table is not None and inbound.route.endpoint.name not in CREATES:
        return NoSuchTable(f"table does not exist: {resource.name}")
    return NoSuchNamespace(f"namespace does not exist: {'.'.join(resource.namespace)}")


def _tables_on_the_way(resource: Resource) -> list[Resource]:
    """The tables a namespace's levels would pass through: level ``i + 1`` taken as a table in
    the first ``i`` levels, for every level after the first."""
    levels = resource.namespace
    return [Resource(resource.catalog, levels[:i], levels[i]) for i in range(1, len(levels))]
