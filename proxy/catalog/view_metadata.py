"""View metadata of the embedded catalog: a new view's first metadata, and a replace applied to it.

The rules follow the Iceberg view spec and Java's ``ViewMetadata.Builder``: a view's first
schema is schema 0 and its first version is version 1; an added schema or version identical to
one the view already holds reuses that one's id, otherwise takes the next id; ``-1`` in
``add-view-version``'s ``schema-id`` or in ``set-current-view-version`` means "the one added by
this commit"; each change of the current version is logged in ``version-log``. A requirement
that does not hold is a 409 (the client reloads and retries); an update that cannot apply is a
400. Locations must stay in the warehouse (``proxy.catalog.locations``).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

from proxy.catalog.locations import Warehouse
from proxy.catalog.view_wire import (
    AddSchema,
    AddViewVersion,
    AssertViewUUID,
    AssignUUID,
    CreateViewRequest,
    RemoveProperties,
    SetCurrentViewVersion,
    SetLocation,
    SetProperties,
    UpgradeFormatVersion,
    ViewUpdate,
    ViewVersionBody,
)
from proxy.errors import BadRequest, CommitFailed

VIEW_FORMAT_VERSION = 1
LAST_ADDED = -1


def now_ms() -> int:
    return int(time.time() * 1000)


def new_view_metadata(request: CreateViewRequest, location: str) -> ViewMetadata:
    """The first metadata of a view created by ``request`` at ``location``."""
    schema = request.view_schema.model_copy(update={"schema_id": 0})
    version = _version(request.view_version, version_id=1, schema_id=0, timestamp_ms=now_ms())
    return ViewMetadata.model_validate({
        "view-uuid": str(uuid.uuid4()),
        "format-version": VIEW_FORMAT_VERSION,
        "location": location.rstrip("/"),
        "schemas": [schema],
        "current-version-id": 1,
        "versions": [version],
        "version-log": [_log_entry(version.timestamp_ms, 1)],
        "properties": dict(request.properties),
    })


def check_requirements(base: ViewMetadata, requirements: list[AssertViewUUID]) -> None:
    """409 when a requirement does not hold for ``base``."""
    for requirement in requirements:
        if requirement.uuid != base.view_uuid:
            raise CommitFailed("Requirement failed: view UUID does not match")


def apply_updates(base: ViewMetadata, updates: list[ViewUpdate],
                  warehouse: Warehouse) -> ViewMetadata:
    """``base`` with ``updates`` applied in order; 400 when one cannot apply."""
    builder = _Builder.of(base)
    for update in updates:
        builder.apply(update, warehouse)
    return builder.build()


@dataclass
class _Builder:
    """The mutable state of a view's metadata while a replace is applied."""

    fields: dict[str, Any]
    schemas: list[Schema]
    versions: list[ViewVersion]
    version_log: list[ViewHistoryEntry]
    properties: dict[str, str]
    last_schema_id: int | None = None
    last_version_id: int | None = None
    added_versions: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, base: ViewMetadata) -> _Builder:
        return cls({"view-uuid": base.view_uuid, "format-version": base.format_version,
                    "location": base.location, "current-version-id": base.current_version_id},
                   list(base.schemas), list(base.versions), list(base.version_log),
                   dict(base.properties))

    def apply(self, update: ViewUpdate, warehouse: Warehouse) -> None:
        if isinstance(update, AssignUUID):
            if update.uuid != self.fields["view-uuid"]:
                raise BadRequest("a view's UUID cannot be reassigned")
        elif isinstance(update, UpgradeFormatVersion):
            if update.format_version != VIEW_FORMAT_VERSION:
                raise BadRequest(f"unsupported view format version {update.format_version}")
        elif isinstance(update, AddSchema):
            self._add_schema(update.view_schema)
        elif isinstance(update, SetLocation):
            warehouse.check(update.location, "view location")
            self.fields["location"] = update.location.rstrip("/")
        elif isinstance(update, SetProperties):
            self.properties.update(update.updates)
        elif isinstance(update, RemoveProperties):
            for key in update.removals:
                self.properties.pop(key, None)
        elif isinstance(update, AddViewVersion):
            self._add_version(update.view_version)
        elif isinstance(update, SetCurrentViewVersion):
            self._set_current(update.view_version_id)

    def _add_schema(self, schema: Schema) -> None:
        same = next((s for s in self.schemas if s == schema), None)  # == ignores the id
        if same is None:
            same = schema.model_copy(
                update={"schema_id": max(s.schema_id for s in self.schemas) + 1})
            self.schemas.append(same)
        self.last_schema_id = same.schema_id

    def _add_version(self, body: ViewVersionBody) -> None:
        schema_id = body.schema_id
        if schema_id == LAST_ADDED:
            if self.last_schema_id is None:
                raise BadRequest("schema-id -1 needs a schema added earlier in the same commit")
            schema_id = self.last_schema_id
        if all(s.schema_id != schema_id for s in self.schemas):
            raise BadRequest(f"the view has no schema {schema_id}")
        candidate = _version(body, version_id=0, schema_id=schema_id,
                             timestamp_ms=body.timestamp_ms)
        same = next((v for v in self.versions if _same_version(v, candidate)), None)
        if same is None:
            same = candidate.model_copy(
                update={"version_id": max(v.version_id for v in self.versions) + 1})
            self.versions.append(same)
            self.added_versions.add(same.version_id)
        self.last_version_id = same.version_id

    def _set_current(self, version_id: int) -> None:
        if version_id == LAST_ADDED:
            if self.last_version_id is None:
                raise BadRequest("view-version-id -1 needs a version added earlier in the same "
                                 "commit")
            version_id = self.last_version_id
        version = next((v for v in self.versions if v.version_id == version_id), None)
        if version is None:
            raise BadRequest(f"the view has no version {version_id}")
        if version_id == self.fields["current-version-id"]:
            return
        self.fields["current-version-id"] = version_id
        stamp = version.timestamp_ms if version_id in self.added_versions else now_ms()
        self.version_log.append(_log_entry(stamp, version_id))

    def build(self) -> ViewMetadata:
        return ViewMetadata.model_validate({
            **self.fields, "schemas": self.schemas, "versions": self.versions,
            "version-log": self.version_log, "properties": self.properties})


def _log_entry(timestamp_ms: int, version_id: int) -> ViewHistoryEntry:
    return ViewHistoryEntry.model_validate({"timestamp-ms": timestamp_ms, "version-id": version_id})


def _version(body: ViewVersionBody, version_id: int, schema_id: int,
             timestamp_ms: int) -> ViewVersion:
    return ViewVersion.model_validate({
        "version-id": version_id,
        "schema-id": schema_id,
        "timestamp-ms": timestamp_ms,
        "summary": dict(body.summary),
        "representations": [r.model_dump(by_alias=True) for r in body.representations],
        "default-catalog": body.default_catalog,
        "default-namespace": body.default_namespace,
    })


def _same_version(left: ViewVersion, right: ViewVersion) -> bool:
    """Equal but for id and timestamp (Java reuses such a version rather than adding it)."""
    ignored = {"version_id", "timestamp_ms"}
    return bool(left.model_dump(exclude=ignored) == right.model_dump(exclude=ignored))
