"""loadView for principals under column rules: a view's definition must not name what is hidden.

A view's metadata carries its SQL (every version's) and its output schemas, which name the
columns and tables the view reads. Column rules hide a column's very existence from a principal
(loadTable drops it), so a view over it would tell what loadTable hides. For a principal whose
column rules (SELECT denies, masks) name anything, loadView reads the view's answer and refuses
it (403) when a schema field or a word of any version's SQL is one of those names; otherwise,
and for every other principal, the backing's answer is relayed unchanged. The check is by name,
so it errs on the side of refusing: a view over another table with a column of the same name is
refused too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from starlette.responses import Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed_answer
from proxy.errors import BackingUnavailable, Forbidden
from proxy.inbound import InboundRequest
from proxy.policy import PolicyAuthorizer

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


class ViewHandlers:
    """The view endpoints icegov answers itself (loadView)."""

    def __init__(self, forwarder: Forwarder, authorizer: PolicyAuthorizer) -> None:
        self._forwarder = forwarder
        self._authorizer = authorizer

    async def load_view(self, inbound: InboundRequest, admission: Admission) -> Response:
        principal = admission.principal
        hidden = self._authorizer.hidden_names(principal) if principal is not None else None
        if not hidden:
            return await self._forwarder.forward(inbound)
        upstream = await self._forwarder.exchange(inbound)
        if upstream.status_code == 200 and names_any(_metadata(upstream.content), hidden):
            assert principal is not None
            raise Forbidden(f"{principal.name} may not load this view: its definition names "
                            "columns or tables hidden from it")
        return relayed_answer(upstream, upstream.content)


def names_any(metadata: dict[str, Any], hidden: frozenset[str]) -> bool:
    """Whether a schema field (or a word of its doc), a word of a SQL representation or a word
    of a property value of ``metadata`` (view metadata JSON) is one of the ``hidden``
    (lowercased) names."""
    names = {name.lower() for name in _field_names(metadata.get("schemas"))}
    texts = [sql.lower() for sql in _sql_texts(metadata.get("versions"))]
    properties = metadata.get("properties")  # e.g. Spark's spark.query-column-names
    if isinstance(properties, dict):
        texts += [str(value).lower() for value in properties.values()]
    names.update(word.lower() for text in texts for word in _WORD.findall(text))
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


def _sql_texts(versions: Any) -> Iterator[str]:
    if not isinstance(versions, list):
        return
    for version in versions:
        representations = version.get("representations") if isinstance(version, dict) else None
        for representation in representations if isinstance(representations, list) else ():
            if isinstance(representation, dict) and isinstance(representation.get("sql"), str):
                yield representation["sql"]
