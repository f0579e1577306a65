"""Intent: what a request does, as actions on typed resources — before anything is forwarded.

Every endpoint of the route table maps to one small function here; ``check_intents_complete``
fails start-up if an endpoint has none (deny by default: nothing reaches the backing catalog
without an intent). Every name a request carries — namespace levels and table names in the path,
``parent``, identifiers in bodies — is validated here (``proxy.resources``) before it becomes a
resource, so what is authorized is exactly what the backing catalog will act on.

Table commits are not fully decided here: the intent names the tables a commit changes, and their
actions come from classifying each commit against the table's manifests (``proxy.gate.enforce``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyiceberg.schema import Schema

from proxy.audit.notes import body_places, change_places, namespace_places, purge
from proxy.commits.dependencies import PROPERTY as DEPENDENCIES
from proxy.commits.dependencies import parse_dependencies
from proxy.errors import BadRequest, PayloadTooLarge
from proxy.governance import TABLE_ACTIONS, Action
from proxy.inbound import InboundRequest
from proxy.locations import LOCATION_PROPERTIES, NAMESPACE_LOCATION
from proxy.resources import Resource, refuse_other_cases, validate_name, validate_namespace
from proxy.routes import ENDPOINTS, NAMESPACE_SEPARATOR


@dataclass(frozen=True)
class Need:
    """One action on one resource that the request needs."""

    action: Action
    resource: Resource


@dataclass(frozen=True)
class TableChange:
    """One table a commit request changes, with its part of the body (requirements, updates)."""

    resource: Resource
    body: dict[str, Any]


@dataclass(frozen=True)
class Intent:
    """What a request does.

    ``hide`` names the resources to answer 404 for when the principal holds no right at all on
    them (existence is not revealed); ``listing`` marks responses whose entries are filtered to
    what the principal can see; ``changes`` are the tables a commit changes, whose needs come
    from classification.
    """

    needs: tuple[Need, ...] = ()
    hide: tuple[Resource, ...] = ()
    listing: str | None = None  # "namespaces" | "identifiers"
    changes: tuple[TableChange, ...] = ()
    public: bool = False
    evidence: tuple[dict[str, Any], ...] = ()
    """What the request asks for beyond its rights, for the audit record: a purge, the metadata
    file a register adopts, the place a create chooses."""

    @property
    def commit(self) -> bool:
        return bool(self.changes)


@dataclass(frozen=True)
class Names:
    """Turns validated names into resources of one catalog."""

    catalog: str
    max_table_changes: int = 100
    lower_case: bool = False
    """The backing folds names to lower case: only names already in lower case are taken."""

    def namespace(self, levels: object, what: str = "namespace") -> Resource:
        return self._checked(Resource(self.catalog, validate_namespace(levels, what)))

    def table(self, levels: object, name: object, what: str = "table name") -> Resource:
        return self._checked(Resource(self.catalog, validate_namespace(levels),
                                      validate_name(name, what)))

    def _checked(self, resource: Resource) -> Resource:
        if self.lower_case:
            refuse_other_cases(resource)
        return resource


IntentFn = Callable[[InboundRequest, Names], Intent]

PUBLIC_ENDPOINTS = frozenset({"oauth_tokens"})
"""Endpoints anyone may call: getting a token needs no token."""


def _path_namespace(inbound: InboundRequest, names: Names) -> Resource:
    return names.namespace(list(inbound.route.namespace))


def _path_table(inbound: InboundRequest, names: Names, key: str = "table") -> Resource:
    return names.table(list(inbound.route.namespace), inbound.route.params[key])


def _body(inbound: InboundRequest) -> dict[str, Any]:
    body = inbound.json()
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _on_table(action: Action, key: str = "table") -> IntentFn:
    def intent(inbound: InboundRequest, names: Names) -> Intent:
        resource = _path_table(inbound, names, key)
        return Intent((Need(action, resource),), hide=(resource,))
    return intent


def _on_namespace(action: Action) -> IntentFn:
    def intent(inbound: InboundRequest, names: Names) -> Intent:
        resource = _path_namespace(inbound, names)
        return Intent((Need(action, resource),), hide=(resource,))
    return intent


def _public(_: InboundRequest, __: Names) -> Intent:
    return Intent(public=True)


def _authenticated(_: InboundRequest, __: Names) -> Intent:
    return Intent()


def _check_page_size(inbound: InboundRequest) -> None:
    size = inbound.query("pageSize")
    if size is not None and not (size.isdigit() and 0 < int(size) <= MAX_PAGE_SIZE):
        raise BadRequest(f"pageSize must be an integer from 1 to {MAX_PAGE_SIZE}")


MAX_PAGE_SIZE = 10_000


def _list_namespaces(inbound: InboundRequest, names: Names) -> Intent:
    _check_page_size(inbound)
    parent = inbound.query("parent")
    if parent is None:
        return Intent((Need(Action.LIST, Resource(names.catalog)),), listing="namespaces")
    resource = names.namespace(parent.split(NAMESPACE_SEPARATOR), "parent")
    return Intent((Need(Action.LIST, resource),), hide=(resource,), listing="namespaces")


def _list_tables(inbound: InboundRequest, names: Names) -> Intent:
    _check_page_size(inbound)
    resource = _path_namespace(inbound, names)
    return Intent((Need(Action.LIST, resource),), hide=(resource,), listing="identifiers")


def _create_namespace(inbound: InboundRequest, names: Names) -> Intent:
    body = _body(inbound)
    resource = names.namespace(body.get("namespace"))
    needs = [Need(Action.CREATE_NAMESPACE, resource)]
    properties = body.get("properties")
    if isinstance(properties, dict) and NAMESPACE_LOCATION in properties:
        needs.append(Need(Action.REGISTER_TABLE, resource))
    return Intent(tuple(needs), evidence=namespace_places(resource, properties))


def _update_namespace_properties(inbound: InboundRequest, names: Names) -> Intent:
    """ALTER_NAMESPACE; changing the namespace's ``location`` (where its new tables' files go
    by default, so over another table's files if one likes) also needs REGISTER_TABLE."""
    body = _body(inbound)
    resource = _path_namespace(inbound, names)
    needs = [Need(Action.ALTER_NAMESPACE, resource)]
    updates, removals = body.get("updates"), body.get("removals")
    if (isinstance(updates, dict) and NAMESPACE_LOCATION in updates) or (
            isinstance(removals, list) and NAMESPACE_LOCATION in removals):
        needs.append(Need(Action.REGISTER_TABLE, resource))
    return Intent(tuple(needs), hide=(resource,), evidence=namespace_places(resource, updates))


def _named_in_body(action: Action) -> IntentFn:
    def intent(inbound: InboundRequest, names: Names) -> Intent:
        body = _body(inbound)
        resource = names.table(list(inbound.route.namespace), body.get("name"), "name")
        needs = [Need(action, resource)]
        if action == Action.CREATE_TABLE and chooses_location(body):
            needs.append(Need(Action.REGISTER_TABLE, resource))
        if action == Action.CREATE_TABLE:
            check_created_dependencies(body)
        if action == Action.REGISTER_TABLE and overwrites(body):
            needs.extend(Need(a, resource) for a in sorted(TABLE_ACTIONS) if a != action)
        return Intent(tuple(needs), evidence=body_places(resource, body))
    return intent


def _drop_table(inbound: InboundRequest, names: Names) -> Intent:
    """DROP_TABLE; a purge (``purgeRequested``, which deletes the table's files) is noted for
    the audit record as the caller sent it."""
    intent = _on_table(Action.DROP_TABLE)(inbound, names)
    notes = purge(intent.needs[0].resource, inbound.query("purgeRequested"))
    return Intent(intent.needs, hide=intent.hide, evidence=notes)


def check_created_dependencies(body: dict[str, Any]) -> None:
    """400 when a create sets ``icegov.column-dependencies`` that its schema does not allow."""
    properties = body.get("properties")
    if not isinstance(properties, dict) or DEPENDENCIES not in properties:
        return
    try:
        schema = Schema.model_validate(body.get("schema"))
    except (ValueError, TypeError):
        raise BadRequest(f"{DEPENDENCIES} cannot be checked: the table's schema cannot be "
                         "read") from None
    parse_dependencies(properties[DEPENDENCIES], schema)


def overwrites(body: dict[str, Any]) -> bool:
    """A register that replaces the table of that name, if there is one (``overwrite``): it can
    roll the table back to any state or swap it for another, so it needs every table right."""
    value = body.get("overwrite")
    if value is None:
        return False
    if not isinstance(value, bool):  # a lenient backing could read "true" as true
        raise BadRequest("overwrite must be true or false")
    return value


def chooses_location(body: dict[str, Any]) -> bool:
    """A create that places the table's files itself (``location``, ``write.*.path``): it could
    place them over another table's, so it needs ``REGISTER_TABLE`` like adopting files does."""
    properties = body.get("properties")
    return body.get("location") is not None or (
        isinstance(properties, dict) and any(p in properties for p in LOCATION_PROPERTIES))


def _create_view(inbound: InboundRequest, names: Names) -> Intent:
    """CREATE_TABLE on the view (and REGISTER_TABLE when it places its own files); the body
    must be a valid view create (400 here: a backing's failure on it is not the caller's)."""
    from proxy.catalog.view_wire import CreateViewRequest
    from proxy.catalog.wire import parse_body

    parse_body(CreateViewRequest, inbound)
    return _named_in_body(Action.CREATE_TABLE)(inbound, names)


def _replace_view(inbound: InboundRequest, names: Names) -> Intent:
    """ALTER and SELECT on the view (its answer is the whole definition, every version's SQL:
    what loadView shows only with SELECT); moving its files (``set-location``) also needs
    REGISTER_TABLE, as for a table. The body must be a valid view commit."""
    from proxy.catalog.view_wire import CommitViewRequest, SetLocation
    from proxy.catalog.wire import parse_body

    request = parse_body(CommitViewRequest, inbound)
    resource = _path_table(inbound, names, "view")
    if request.identifier is not None and names.table(
            list(request.identifier.namespace), request.identifier.name) != resource:
        raise BadRequest("the commit's identifier names another view than its URL")
    needs = [Need(Action.ALTER, resource), Need(Action.SELECT, resource)]
    if any(isinstance(update, SetLocation) for update in request.updates):
        needs.append(Need(Action.REGISTER_TABLE, resource))
    return Intent(tuple(needs), hide=(resource,),
                  evidence=change_places(resource, _body(inbound)))


def _rename(inbound: InboundRequest, names: Names) -> Intent:
    body = _body(inbound)
    source, destination = (_identifier(body.get(k), names, k) for k in ("source", "destination"))
    return Intent((Need(Action.RENAME_TABLE, source), Need(Action.CREATE_TABLE, destination)),
                  hide=(source,))


def _commit(inbound: InboundRequest, names: Names) -> Intent:
    resource = _path_table(inbound, names)
    body = _body(inbound)
    if body.get("identifier") is not None and _identifier(
            body["identifier"], names, "identifier") != resource:
        raise BadRequest("the commit's identifier names another table than its URL")
    return Intent(hide=(resource,), changes=(TableChange(resource, body),),
                  evidence=change_places(resource, body))


def _transaction(inbound: InboundRequest, names: Names) -> Intent:
    changes = _body(inbound).get("table-changes")
    if not isinstance(changes, list) or not changes:
        raise BadRequest("'table-changes' must be a non-empty list")
    if len(changes) > names.max_table_changes:
        raise PayloadTooLarge(f"a transaction may change at most {names.max_table_changes} "
                              "tables")
    parsed = tuple(_table_change(change, names) for change in changes)
    if len({c.resource for c in parsed}) != len(parsed):
        raise BadRequest("a transaction may change each table only once")
    notes = tuple(n for c in parsed for n in change_places(c.resource, c.body))
    return Intent(hide=tuple(c.resource for c in parsed), changes=parsed, evidence=notes)


def _table_change(change: Any, names: Names) -> TableChange:
    if not isinstance(change, dict):
        raise BadRequest("every entry of 'table-changes' must be an object")
    return TableChange(_identifier(change.get("identifier"), names, "identifier"), change)


def _identifier(value: Any, names: Names, what: str) -> Resource:
    if not isinstance(value, dict):
        raise BadRequest(f"'{what}' must be a table identifier object")
    return names.table(value.get("namespace"), value.get("name"), f"{what} name")


def _report_metrics(inbound: InboundRequest, names: Names) -> Intent:
    """A metrics report about the table in the path: its ``table-name`` (the client's full
    name of the table, e.g. ``catalog.db.events``) must name that table, not another one the
    caller may not read (the backing would file the report under it)."""
    resource = _path_table(inbound, names)
    reported = _body(inbound).get("table-name")
    if reported is not None:
        identifier = ".".join((*resource.namespace, str(resource.table)))
        if not isinstance(reported, str) or not (
                reported == identifier or reported.endswith("." + identifier)):
            raise BadRequest("the metrics report's 'table-name' is not the table in the path")
    return Intent((Need(Action.SELECT, resource),), hide=(resource,))


INTENTS: dict[str, IntentFn] = {
    "get_config": _authenticated,
    "oauth_tokens": _public,
    "list_namespaces": _list_namespaces,
    "create_namespace": _create_namespace,
    "load_namespace": _on_namespace(Action.DESCRIBE),
    "namespace_exists": _on_namespace(Action.DESCRIBE),
    "drop_namespace": _on_namespace(Action.DROP_NAMESPACE),
    "update_namespace_properties": _update_namespace_properties,
    "list_tables": _list_tables,
    "create_table": _named_in_body(Action.CREATE_TABLE),
    "register_table": _named_in_body(Action.REGISTER_TABLE),
    "load_table": _on_table(Action.SELECT),
    "table_exists": _on_table(Action.DESCRIBE),
    "commit_table": _commit,
    "drop_table": _drop_table,
    "load_credentials": _on_table(Action.SELECT),
    "report_metrics": _report_metrics,
    "plan_table_scan": _on_table(Action.SELECT),
    "fetch_planning_result": _on_table(Action.SELECT),
    "cancel_planning": _on_table(Action.SELECT),
    "fetch_scan_tasks": _on_table(Action.SELECT),
    "rename_table": _rename,
    "commit_transaction": _transaction,
    "list_views": _list_tables,
    "create_view": _create_view,
    "register_view": _named_in_body(Action.REGISTER_TABLE),  # adopts a metadata file
    "load_view": _on_table(Action.SELECT, "view"),
    "view_exists": _on_table(Action.DESCRIBE, "view"),
    "replace_view": _replace_view,
    "drop_view": _on_table(Action.DROP_TABLE, "view"),
    "rename_view": _rename,
    # the grant in the path names the table and the rights, decided at loadTable: the signer
    # checks it was issued to this caller (proxy.signing)
    "sign_s3_request": _authenticated,
    "sign_s3_request_ungranted": _authenticated,
}


def check_intents_complete() -> None:
    """Fail start-up if some endpoint of the route table has no intent."""
    missing = sorted(e.name for e in ENDPOINTS if e.name not in INTENTS)
    if missing:
        raise RuntimeError(f"endpoints without an intent (would be ungoverned): {missing}")


def intent_of(inbound: InboundRequest, names: Names) -> Intent:
    """The intent of a request (table commits: the part known before classification)."""
    return INTENTS[inbound.route.endpoint.name](inbound, names)
