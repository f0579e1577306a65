"""The table answers of governed principals: the seam the table handlers call.

``GovernedAnswers.answer`` takes a restricted principal's LoadTableResult or CommitTableResponse
from the backing and returns it as that principal may receive it: the metadata without denied
columns (``proxy.reads.projection``), its snapshots governed (``service``), its
``metadata-location`` the governed metadata file, its ``config`` the backing's own (no
``scan-planning-mode: server``: governed data is safe to plan locally, and a client that
configures storage from a non-empty ``config``, DuckDB, would demand a region there), and no
``read-restrictions`` (the data is already filtered and masked: a client that applied the masks
again would corrupt it). The audit
record's evidence says which view, base snapshot and staleness the answer served.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from proxy.backing.tables import io_properties as backing_io_properties
from proxy.governed.metadata import PROPERTY_PREFIX
from proxy.governed.service import GovernedSnapshots
from proxy.governed.views import governs
from proxy.reads.projection import READ_RESTRICTIONS, project_load_result
from proxy.resources import Resource
from proxy.restrictions import ReadView

Json = dict[str, Any]
_VIEW_PROPERTY = f"{PROPERTY_PREFIX}view"


def columns_only(view: ReadView) -> ReadView:
    """``view`` with only its denied columns: what the governed metadata's schemas lose."""
    return replace(view, masks=MappingProxyType({}), row_filter=None)


class GovernedAnswers:
    """Governed table answers, from the one governed-snapshot service."""

    def __init__(self, service: GovernedSnapshots, file_io: Mapping[str, str]) -> None:
        self.service = service
        self._file_io = dict(file_io)

    @staticmethod
    def governs(view: ReadView) -> bool:
        """True when ``view``'s principal is served governed snapshots."""
        return governs(view)

    @staticmethod
    def is_governed(result: Json) -> bool:
        """True for an answer ``answer`` produced (its metadata names its view)."""
        metadata = result.get("metadata")
        properties = metadata.get("properties") if isinstance(metadata, dict) else None
        return isinstance(properties, dict) and _VIEW_PROPERTY in properties

    async def answer(self, result: Json, view: ReadView, metadata: TableMetadata,
                     table: Resource, evidence: list[Json], io: FileIO | None = None) -> Json:
        """``result`` as ``view``'s principal receives it, governed (``io``: the table's
        FileIO, when the caller has one)."""
        base = project_load_result(result, columns_only(view), applies_masks=False) \
            if view.denied else result
        # one rule for every FileIO icegov opens (``backing.tables.io_properties``): the
        # catalog's config over icegov's settings, and no ``py-io-impl`` from either
        io_properties = backing_io_properties(self._file_io, _config(result))
        if io is None:  # as parse_table_state opens it, without parsing the metadata again
            location = result.get("metadata-location")
            io = load_file_io(io_properties,
                              location if isinstance(location, str) else metadata.location)
        governed = await self.service.govern(base["metadata"], view, metadata, io,
                                             io_properties)
        evidence.append({"resource": str(table), "governed": {
            "view": governed.digest, **governed.freshness.to_json()}})
        answer = {k: v for k, v in base.items() if k not in (READ_RESTRICTIONS, "config")}
        if "config" in result:  # the backing's own: governed data is planned like any table
            answer["config"] = result["config"]
        answer["metadata"] = governed.metadata
        answer["metadata-location"] = governed.metadata_location
        _credentials_for_tree(answer, metadata.location, governed.tree_prefix)
        return answer

    @staticmethod
    def planning_view(view: ReadView, answer: Json) -> ReadView:
        """The view a reader of the governed ``answer`` plans with: its denied columns (the
        rows and masks are in the data), marked with the governed data's digest."""
        properties = answer["metadata"]["properties"]
        return replace(columns_only(view), governed=str(properties[_VIEW_PROPERTY]))

    def landed(self, result: Json) -> None:
        """icegov landed a commit whose answer is ``result``: build the table's new governed
        snapshots now, for every view of it in use."""
        if not self.service.in_use:
            return
        try:
            metadata = TableMetadataUtil.parse_obj(result["metadata"])
        except (ValueError, KeyError, TypeError):
            return
        self.service.landed(metadata)


def _credentials_for_tree(answer: Json, location: str, tree: str) -> None:
    """Storage credentials scoped to the table's location are offered for the governed tree
    too (the same store settings; a client picks a credential by path prefix). What of them
    the principal may receive is ``proxy.reads.disclosure``'s to decide."""
    credentials = answer.get("storage-credentials")
    if not isinstance(credentials, list):
        return
    covering = [c for c in credentials if isinstance(c, dict)
                and isinstance(c.get("prefix"), str) and location.startswith(c["prefix"])]
    if not covering:
        return
    best = max(covering, key=lambda c: len(c["prefix"]))
    answer["storage-credentials"] = [*credentials, {**best, "prefix": tree}]


def _config(result: Json) -> dict[str, str]:
    config = result.get("config")
    if not isinstance(config, dict):
        return {}
    return {k: v for k, v in config.items() if isinstance(k, str) and isinstance(v, str)}
