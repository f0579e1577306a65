"""Intent: what a request does, as actions on resources — before anything is forwarded.

Every endpoint of the route table maps to one small function here; ``check_intents_complete``
fails start-up if an endpoint has none (deny by default: nothing reaches the backing catalog
without an intent). Table commits are not decided here: their actions come from classifying the
commit against the table's manifests (``proxy.commits``), see ``proxy.enforce``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.errors import BadRequest
from proxy.governance import Action, resource_path
from proxy.inbound import InboundRequest
from proxy.routes import ENDPOINTS, NAMESPACE_SEPARATOR


@dataclass(frozen=True)
class Need:
    """One action on one resource that the request needs."""

    action: Action
    resource: str


@dataclass(frozen=True)
class Intent:
    """What a request does.

    ``hide`` names the resource to answer 404 for when the principal holds no right on it at all
    (existence is not revealed); ``listing`` marks responses whose entries are filtered to what
    the principal can see; ``commit`` marks table commits, whose needs come from classification.
    """

    needs: tuple[Need, ...] = ()
    hide: str | None = None
    hides_table: bool = False
    listing: str | None = None  # "namespaces" | "identifiers"
    commit: bool = False
    public: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.resource for n in self.needs))


IntentFn = Callable[[InboundRequest, str], Intent]


def _ns(inbound: InboundRequest, catalog: str) -> str:
    return resource_path(catalog, inbound.route.namespace)


def _table(inbound: InboundRequest, catalog: str, key: str = "table") -> str:
    return resource_path(catalog, inbound.route.namespace, inbound.route.params[key])


def _body(inbound: InboundRequest) -> dict[str, Any]:
    body = inbound.json()
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _on_table(action: Action, key: str = "table") -> IntentFn:
    def intent(inbound: InboundRequest, catalog: str) -> Intent:
        resource = _table(inbound, catalog, key)
        return Intent((Need(action, resource),), hide=resource, hides_table=True)
    return intent


def _on_namespace(action: Action, hide: bool = True) -> IntentFn:
    def intent(inbound: InboundRequest, catalog: str) -> Intent:
        resource = _ns(inbound, catalog)
        return Intent((Need(action, resource),), hide=resource if hide else None)
    return intent


def _public(_: InboundRequest, __: str) -> Intent:
    return Intent(public=True)


def _authenticated(_: InboundRequest, __: str) -> Intent:
    return Intent()


def _list_namespaces(inbound: InboundRequest, catalog: str) -> Intent:
    parent = inbound.query("parent")
    levels = tuple(parent.split(NAMESPACE_SEPARATOR)) if parent else ()
    return Intent((Need(Action.LIST, resource_path(catalog, levels)),), listing="namespaces")


def _list_tables(inbound: InboundRequest, catalog: str) -> Intent:
    resource = _ns(inbound, catalog)
    return Intent((Need(Action.LIST, resource),), hide=resource, listing="identifiers")


def _create_namespace(inbound: InboundRequest, catalog: str) -> Intent:
    levels = _body(inbound).get("namespace")
    if not isinstance(levels, list) or not all(isinstance(x, str) for x in levels) or not levels:
        raise BadRequest("'namespace' must be a non-empty list of strings")
    return Intent((Need(Action.CREATE_NAMESPACE, resource_path(catalog, tuple(levels))),))


def _named_in_body(action: Action) -> IntentFn:
    def intent(inbound: InboundRequest, catalog: str) -> Intent:
        name = _body(inbound).get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest("'name' is required")
        return Intent((Need(action, resource_path(catalog, inbound.route.namespace, name)),))
    return intent


def _rename(inbound: InboundRequest, catalog: str) -> Intent:
    body = _body(inbound)
    source, destination = (_identifier(body.get(k), catalog) for k in ("source", "destination"))
    return Intent((Need(Action.RENAME_TABLE, source), Need(Action.CREATE_TABLE, destination)),
                  hide=source, hides_table=True)


def _commit(inbound: InboundRequest, catalog: str) -> Intent:
    return Intent(hide=_table(inbound, catalog), hides_table=True, commit=True)


def _transaction(_: InboundRequest, __: str) -> Intent:
    return Intent(commit=True)


def _identifier(value: Any, catalog: str) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise BadRequest(f"invalid table identifier: {value!r}")
    namespace = value.get("namespace") or []
    return resource_path(catalog, tuple(str(x) for x in namespace), value["name"])


INTENTS: dict[str, IntentFn] = {
    "get_config": _authenticated,
    "oauth_tokens": _public,
    "list_namespaces": _list_namespaces,
    "create_namespace": _create_namespace,
    "load_namespace": _on_namespace(Action.DESCRIBE),
    "namespace_exists": _on_namespace(Action.DESCRIBE),
    "drop_namespace": _on_namespace(Action.DROP_NAMESPACE),
    "update_namespace_properties": _on_namespace(Action.ALTER_NAMESPACE),
    "list_tables": _list_tables,
    "create_table": _named_in_body(Action.CREATE_TABLE),
    "register_table": _named_in_body(Action.REGISTER_TABLE),
    "load_table": _on_table(Action.SELECT),
    "table_exists": _on_table(Action.DESCRIBE),
    "commit_table": _commit,
    "drop_table": _on_table(Action.DROP_TABLE),
    "load_credentials": _on_table(Action.SELECT),
    "report_metrics": _on_table(Action.SELECT),
    "plan_table_scan": _on_table(Action.SELECT),
    "fetch_planning_result": _on_table(Action.SELECT),
    "cancel_planning": _on_table(Action.SELECT),
    "fetch_scan_tasks": _on_table(Action.SELECT),
    "rename_table": _rename,
    "commit_transaction": _transaction,
    "list_views": _list_tables,
    "create_view": _named_in_body(Action.CREATE_TABLE),
    "register_view": _named_in_body(Action.CREATE_TABLE),
    "load_view": _on_table(Action.SELECT, "view"),
    "view_exists": _on_table(Action.DESCRIBE, "view"),
    "replace_view": _on_table(Action.ALTER, "view"),
    "drop_view": _on_table(Action.DROP_TABLE, "view"),
    "rename_view": _rename,
}


def check_intents_complete() -> None:
    """Fail start-up if some endpoint of the route table has no intent."""
    missing = sorted(e.name for e in ENDPOINTS if e.name not in INTENTS)
    if missing:
        raise RuntimeError(f"endpoints without an intent (would be ungoverned): {missing}")


def intent_of(inbound: InboundRequest, catalog: str) -> Intent:
    """The intent of a request (table commits: the part known before classification)."""
    return INTENTS[inbound.route.endpoint.name](inbound, catalog)
