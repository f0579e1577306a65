"""The embedded catalog's view request bodies, as strict pydantic models of the Iceberg REST spec.

``CreateViewRequest`` and ``CommitViewRequest`` (the body of ``POST …/views/{view}``, which the
Java client sends as an ``UpdateTableRequest``) with the view requirement ``assert-view-uuid`` and
the view updates the spec defines: ``assign-uuid``, ``upgrade-format-version``, ``add-schema``,
``set-location``, ``set-properties``, ``remove-properties``, ``add-view-version`` and
``set-current-view-version``. Any other action (a table update such as ``set-current-schema``)
is a 400. Schemas are pyiceberg's own model; everything else is type-checked strictly, like the
table bodies in ``proxy.catalog.wire``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt, StrictStr, model_validator
from pyiceberg.schema import Schema
from pyiceberg.typedef import Identifier

from proxy.catalog.wire import (
    Name,
    NamespaceProperties,
    TableIdentifier,
    WireModel,
    check_field_ids,
    path_namespace,
    table_name,
)
from proxy.inbound import InboundRequest

MAX_PAGE_SIZE = 1000


class SQLRepresentation(WireModel):
    type: Literal["sql"]
    sql: StrictStr
    dialect: Annotated[StrictStr, Field(min_length=1, max_length=255)]


class ViewVersionBody(WireModel):
    """A view version as a client sends it (``schema-id`` -1: the schema added by this commit)."""

    version_id: StrictInt = Field(alias="version-id")
    timestamp_ms: StrictInt = Field(alias="timestamp-ms", ge=0)
    schema_id: StrictInt = Field(alias="schema-id", ge=-1)
    summary: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    representations: list[SQLRepresentation] = Field(min_length=1)
    default_catalog: StrictStr | None = Field(default=None, alias="default-catalog")
    default_namespace: tuple[StrictStr, ...] = Field(alias="default-namespace")

    @model_validator(mode="after")
    def _one_query_per_dialect(self) -> ViewVersionBody:
        dialects = [r.dialect.lower() for r in self.representations]
        if len(set(dialects)) != len(dialects):
            raise ValueError("a view version may hold only one query per SQL dialect")
        return self


class CreateViewRequest(WireModel):
    name: Name
    location: StrictStr | None = None
    view_schema: Schema = Field(alias="schema")
    view_version: ViewVersionBody = Field(alias="view-version")
    properties: NamespaceProperties = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_field_ids(self) -> CreateViewRequest:
        check_field_ids(self.view_schema)
        return self


class AssertViewUUID(WireModel):
    type: Literal["assert-view-uuid"]
    uuid: StrictStr


class AssignUUID(WireModel):
    action: Literal["assign-uuid"]
    uuid: StrictStr


class UpgradeFormatVersion(WireModel):
    action: Literal["upgrade-format-version"]
    format_version: StrictInt = Field(alias="format-version")


class AddSchema(WireModel):
    action: Literal["add-schema"]
    view_schema: Schema = Field(alias="schema")

    @model_validator(mode="after")
    def _unique_field_ids(self) -> AddSchema:
        check_field_ids(self.view_schema)
        return self


class SetLocation(WireModel):
    action: Literal["set-location"]
    location: Annotated[StrictStr, Field(min_length=1)]


class SetProperties(WireModel):
    action: Literal["set-properties"]
    updates: NamespaceProperties


class RemoveProperties(WireModel):
    action: Literal["remove-properties"]
    removals: list[StrictStr]


class AddViewVersion(WireModel):
    action: Literal["add-view-version"]
    view_version: ViewVersionBody = Field(alias="view-version")


class SetCurrentViewVersion(WireModel):
    action: Literal["set-current-view-version"]
    view_version_id: StrictInt = Field(alias="view-version-id", ge=-1)


ViewUpdate = Annotated[
    AssignUUID | UpgradeFormatVersion | AddSchema | SetLocation | SetProperties
    | RemoveProperties | AddViewVersion | SetCurrentViewVersion,
    Field(discriminator="action"),
]


class CommitViewRequest(WireModel):
    identifier: TableIdentifier | None = None
    requirements: list[AssertViewUUID] = Field(default_factory=list)
    updates: list[ViewUpdate]


def path_view(inbound: InboundRequest) -> Identifier:
    """(namespace levels..., view) named in the URL, validated."""
    return (*path_namespace(inbound), table_name(inbound.route.params.get("view"), "view name"))
