"""View endpoints for principals under column rules: a view's definition must not name what
is hidden.

A view's metadata carries its SQL (every version's) and its output schemas, which name the
columns and tables the view reads. Column rules hide a column's very existence from a principal
(loadTable drops it), so a view over it would tell what loadTable hides. For a principal whose
column rules (SELECT denies, and masks unless the client applies masks itself) name anything:

- loadView reads the view's answer and refuses it (403) when a schema field or a word of any
  version's SQL or of a property value is one of those names;
- createView and replaceView are refused (403, nothing sent) when what they add names one, and
  replaceView also when the view as it stands does (its answer is the whole metadata, every
  version included); should the view change between that check and the replace so that the
  answer names one, the answer is withheld (403, saying the view was replaced).

The check is by name, so it errs on the side of refusing: a view over another table with a
column of the same name is refused too. For every principal, loadView and replaceView also refuse
a view whose SQL reads a table the principal cannot see at all (``proxy.reads.view_refs``): its
definition would name that table and its columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from anyio import to_thread
from starlette.responses import Response

from proxy.admission.admission import Admission
from proxy.backing.forward import Forwarder, relayed, relayed_answer, server_failure
from proxy.errors import BackingUnavailable, Forbidden
from proxy.inbound import InboundRequest
from proxy.policy import PolicyAuthorizer
from proxy.reads.disclosure import Disclosure, disclosed_response
from proxy.reads.read_views import ReadViews
from proxy.reads.view_refs import unseen_reference

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


class ViewHandlers:
    """The view endpoints icegov answers itself (load, create, replace)."""

    def __init__(self, forwarder: Forwarder, authorizer: PolicyAuthorizer,
                 read_views: ReadViews, disclosure: Disclosure) -> None:
        self._forwarder = forwarder
        self._authorizer = authorizer
        self._read_views = read_views
        self._disclosure = disclosure

    async def load_view(self, inbound: InboundRequest, admission: Admission) -> Response:
        hidden = self._hidden(inbound, admission)
        upstream = await self._forwarder.exchange(inbound)
        if upstream.status_code == 200 and await self._conceals(
                _metadata(upstream.content), hidden, admission):
            raise _refused(admission, "load")
        return self._disclosed(relayed_answer(upstream, upstream.content), admission)

    async def create_view(self, inbound: InboundRequest, admission: Admission) -> Response:
        hidden = self._hidden(inbound, admission)
        if hidden and names_any(_created(inbound.json()), hidden):
            raise _refused(admission, "create")
        if self._disclosure.withheld(admission.principal).nothing:
            return await self._forwarder.forward(inbound)
        upstream = await self._forwarder.exchange(inbound)
        return self._disclosed(relayed_answer(upstream, upstream.content), admission)

    async def replace_view(self, inbound: InboundRequest, admission: Admission) -> Response:
        hidden = self._hidden(inbound, admission)
        if await self._conceals(_replacement(inbound.json()), hidden, admission):
            raise _refused(admission, "change")
        current = await self._forwarder.fetch(inbound.raw_path, b"", inbound.headers)
        if current.status_code == 200 and await self._conceals(
                _metadata(current.content), hidden, admission):
            raise _refused(admission, "change")
        upstream = await self._forwarder.exchange(inbound)
        if upstream.status_code >= 500:
            raise server_failure(upstream.status_code, "replace_view", commit=True)
        if upstream.status_code == 200 and await self._conceals(
                _metadata(upstream.content), hidden, admission):
            assert admission.principal is not None
            raise Forbidden(f"the view was replaced, but its definition now names columns or "
                            f"tables hidden from {admission.principal.name}: it cannot be shown")
        return self._disclosed(relayed(upstream, upstream.content), admission)

    def _disclosed(self, response: Response, admission: Admission) -> Response:
        """A view's answer without what ``proxy.reads.disclosure`` withholds from the caller
        (a LoadViewResult's ``config`` has the same FileIO secrets a table's has)."""
        return disclosed_response(response, self._disclosure.withheld(admission.principal))

    def _hidden(self, inbound: InboundRequest, admission: Admission) -> frozenset[str]:
        principal = admission.principal
        if principal is None:
            return frozenset()
        return self._authorizer.hidden_names(
            principal, masks_shown=self._read_views.applies_masks(principal, inbound.headers))

    async def _conceals(self, metadata: dict[str, Any], hidden: frozenset[str],
                        admission: Admission) -> bool:
        """Whether view ``metadata`` names a column hidden from the principal (``hidden``) or
        reads a table it cannot see (``proxy.reads.view_refs``)."""
        principal = admission.principal
        if principal is None:
            return False
        if hidden and names_any(metadata, hidden):
            return True
        catalog = admission.intent.needs[0].resource.catalog

        def unseen() -> object:  # parsing SQL may take a while: off the event loop
            return unseen_reference(metadata, catalog,
                                    lambda table: self._authorizer.can_see(principal, table))

        return await to_thread.run_sync(unseen) is not None


def _refused(admission: Admission, verb: str) -> Forbidden:
    assert admission.principal is not None
    return Forbidden(f"{admission.principal.name} may not {verb} this view: its definition "
                     "names columns or tables hidden from it")


def _created(body: Any) -> dict[str, Any]:
    """A createView body as view metadata (what ``names_any`` reads)."""
    return {"schemas": [body.get("schema")], "versions": [body.get("view-version")],
            "properties": body.get("properties")}


def _replacement(body: Any) -> dict[str, Any]:
    """What a replaceView body's updates add, as view metadata (what ``names_any`` reads)."""
    updates = [u for u in body.get("updates") or () if isinstance(u, dict)]
    properties: dict[str, Any] = {}
    for update in updates:
        if update.get("action") == "set-properties" and isinstance(update.get("updates"), dict):
            properties.update(update["updates"])
    return {"schemas": [u.get("schema") for u in updates if u.get("action") == "add-schema"],
            "versions": [u.get("view-version") for u in updates
                         if u.get("action") == "add-view-version"],
            "properties": properties}


def names_any(metadata: dict[str, Any], hidden: frozenset[str]) -> bool:
    """Whether a schema field (or a word of its doc), a word of a SQL representation, a
    version's default namespace level or catalog, or a word of a property (key or value) of
    ``metadata`` (view metadata JSON) is one of the ``hidden`` (lowercased) names."""
    names = {name.lower() for name in _field_names(metadata.get("schemas"))}
    texts = [sql.lower() for sql in _sql_texts(metadata.get("versions"))]
    properties = metadata.get("properties")  # e.g. Spark's spark.query-column-names
    if isinstance(properties, dict):
        texts += [str(text).lower() for item in properties.items() for text in item]
    names.update(word.lower() for text in texts for word in _WORD.findall(text))
    names.update(level.lower() for level in _defaults(metadata.get("versions")))
    if not names.isdisjoint(hidden):
        return True
    unusual = [name for name in hidden if not _WORD.fullmatch(name)]
    return any(name in text for name in unusual for text in texts)


def _metadata(content: bytes) -> dict[str, Any]:
    try:
        metadata = json.loads(content)["metadata"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BackingUnavailable("the backing catalog's view is unreadable") from exc
    if not isinstance(metadata, dict):
        raise BackingUnavailable("the backing catalog's view is unreadable")
    return metadata


def _field_names(node: Any) -> Iterator[str]:
    """Every field name in a schema list or a type, nested ones included."""
    if isinstance(node, list):
        for item in node:
            yield from _field_names(item)
    elif isinstance(node, dict):
        for key in ("name", "doc"):
            if isinstance(node.get(key), str):
                yield from _WORD.findall(node[key]) if key == "doc" else (node[key],)
        for key in ("fields", "type", "element", "key", "value"):
            if key in node and not isinstance(node[key], str):
                yield from _field_names(node[key])


def _defaults(versions: Any) -> Iterator[str]:
    """Every version's ``default-namespace`` levels and ``default-catalog``: where its SQL's
    unqualified names resolve (``FROM payroll`` in namespace ``hr`` reads ``hr.payroll``)."""
    for version in versions if isinstance(versions, list) else ():
        if not isinstance(version, dict):
            continue
        levels = version.get("default-namespace")
        yield from (level for level in levels if isinstance(level, str)) \
            if isinstance(levels, list) else ()
        if isinstance(version.get("default-catalog"), str):
            yield version["default-catalog"]


def _sql_texts(versions: Any) -> Iterator[str]:
    if not isinstance(versions, list):
        return
    for version in versions:
        representations = version.get("representations") if isinstance(version, dict) else None
        for representation in representations if isinstance(representations, list) else ():
            if isinstance(representation, dict) and isinstance(representation.get("sql"), str):
                yield representation["sql"]
