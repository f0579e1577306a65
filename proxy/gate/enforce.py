"""The gate every governed request passes, in this order:

1. authenticate (401), and learn what the backing catalog offers;
2. the catalog the ``{prefix}`` selects (an unmapped prefix is 404) and the endpoint: anything
   icegov does not serve itself and the backing does not advertise is refused, never forwarded;
3. the intent from the URL and body, every name validated (400);
4. hide: a resource on which the principal holds no right at all is answered 404 as if absent,
   before any backing call or file read (for every table of a transaction too);
5. the coarse decision: the needed actions, or for a commit any right to change the table (403
   before a single file is read);
6. evidence, for commits only: the table's current state and its manifests, read within limits;
7. the final decision on the classified actions (403), and for a principal whose read view
   hides columns or filters rows, whether the change would drop what it may not see (403).

The audit record says what really happened at each step; the ``Admission`` goes to the handler.
``admit`` runs every step; ``admit_coarse`` (1-5) and ``complete`` (6-7) let the pipeline replay
an Idempotency-Key's stored answer in between: after every check a caller must pass to see it,
before the evidence (a replayed commit has landed already and would no longer classify).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.admission.admission import Admission, ClassifiedChange
from proxy.admission.catalogs import CatalogNames
from proxy.admission.intent import PUBLIC_ENDPOINTS, Intent, Names, Need, intent_of
from proxy.audit import AuditRecord
from proxy.backing.offers import BackingOffers
from proxy.errors import Forbidden, NoSuchNamespace, NoSuchTable, NotFound
from proxy.gate.evidence import ChangeClassifier, discard_built
from proxy.gate.nesting import NamespacePaths
from proxy.governance import Action, Authorizer, Decision, Principal
from proxy.governed.views import governed_view, governs
from proxy.identity import Authenticator
from proxy.inbound import InboundRequest
from proxy.reads.operation_names import judged_operation
from proxy.reads.read_views import ReadViews, describe, hidden_ids
from proxy.reads.writes import (
    changes_schema,
    operation_refusal,
    spec_refusal,
    write_refusal,
)
from proxy.resources import Resource
from proxy.routes import SELF_SERVED

COMMIT_RIGHTS: tuple[Action, ...] = (
    Action.INSERT, Action.DELETE, Action.UPDATE, Action.REWRITE, Action.MANAGE_SNAPSHOTS,
    Action.ALTER, Action.CREATE_TABLE,
)
"""Holding none of these on a table means no commit to it can be allowed."""


RENAMES = frozenset({"rename_table", "rename_view"})
"""Endpoints that move a table or view to another name, which the policy may rule differently."""
REGISTERS = frozenset({"register_table", "register_view"})
"""Endpoints that adopt a metadata file someone else wrote: refused to a principal under column
or row rules (what the file holds, and what the answer relays, is not projected for it)."""


@dataclass(frozen=True)
class Coarse:
    """A request past steps 1-5. ``complete`` is False for a commit, whose ``admission`` still
    lacks the classified changes and the final decisions (``Gate.complete`` adds them)."""

    inbound: InboundRequest
    admission: Admission
    complete: bool = True

    @property
    def principal(self) -> Principal | None:
        return self.admission.principal


class Gate:
    """Decides, for each inbound request, whether it may proceed; fills its audit record."""

    def __init__(self, authenticator: Authenticator, authorizer: Authorizer,
                 offers: BackingOffers, catalogs: CatalogNames, changes: ChangeClassifier,
                 max_table_changes: int, views: ReadViews | None = None,
                 namespace_paths: NamespacePaths | None = None) -> None:
        self._namespace_paths = namespace_paths
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._offers = offers
        self._catalogs = catalogs
        self._changes = changes
        self._max_table_changes = max_table_changes
        self._views = views

    async def admit(self, inbound: InboundRequest, record: AuditRecord) -> Admission:
        """Let the request through or raise 400/401/403/404; fills ``record`` as it goes."""
        return await self.complete(await self.admit_coarse(inbound, record), record)

    async def admit_coarse(self, inbound: InboundRequest, record: AuditRecord) -> Coarse:
        """Steps 1-5: who calls, what for, hidden or not, and the coarse decision (raises
        400/401/403/404). Every request but a commit is decided in full here."""
        endpoint = inbound.route.endpoint
        if endpoint.name in PUBLIC_ENDPOINTS:
            record.decision = "public"
            return Coarse(inbound, Admission(None, Intent(public=True), ""))
        record.decision = "unauthenticated"
        principal = await self._authenticator.authenticate_async(inbound.headers)
        record.principal = principal
        record.decision = "refused"
        offer = await self._offers.current(inbound.headers)
        catalog = self._catalogs.resolve(inbound.route.prefix, offer)
        if endpoint.name not in SELF_SERVED and not offer.serves(endpoint.spec):
            raise NotFound(f"{endpoint.spec} is not offered by this catalog")
        intent = intent_of(inbound, Names(catalog, self._max_table_changes,
                                                 self._catalogs.lower_case))
        record.resources = tuple(str(r) for r in _resources(intent))
        record.evidence.extend(intent.evidence)
        if intent.commit:
            self._admit_commit_coarse(principal, intent, record)
            await self._through_tables(inbound, intent)
            return Coarse(inbound, Admission(principal, intent, catalog), complete=False)
        decisions = self._decide(principal, intent.needs, record)
        self._check(principal, intent.hide, decisions, record)
        await self._through_tables(inbound, intent)
        if endpoint.name in RENAMES:
            self._refuse_shedding_rename(intent, record)
        if endpoint.name in REGISTERS and self._authorizer.restricted_anywhere(principal):
            record.decision = "deny"
            raise Forbidden(f"{principal.name} may not register tables or views: column or row "
                            "rules restrict it, and registering a metadata file would shed them "
                            "(or answer a view's definition unchecked)")
        record.decision = "allow"
        return Coarse(inbound, Admission(principal, intent, catalog, decisions,
                                         evidence=record.evidence))

    async def complete(self, coarse: Coarse, record: AuditRecord,
                       fresh: bool = False) -> Admission:
        """Steps 6-7 for a commit (evidence, then the final decision: 403); any other request
        was decided by ``admit_coarse`` and passes unchanged. ``fresh``: every base is loaded
        (no head this replica knew is judged on)."""
        if coarse.complete:
            return coarse.admission
        admission = coarse.admission
        assert admission.principal is not None  # a commit is never public
        principal = admission.principal
        classified = await self._changes.classify_all(
            coarse.inbound, admission.intent.changes,
            partial(self._refuse_hidden_operation, principal, record), fresh,
            governed=(partial(self._governed_digest, principal)
                      if self._authorizer.restricted_anywhere(principal) else None))
        record.evidence = [*(c.report for c in classified),  # the committer adds how it landed
                           *admission.intent.evidence]
        self._changes.refuse_stale(classified)
        needs = tuple(Need(action, c.resource) for c in classified
                      for action in sorted(c.intent.actions))
        record.resources = tuple(dict.fromkeys(str(n.resource) for n in needs))
        decisions = self._decide(admission.principal, needs, record)
        try:
            self._check(admission.principal, (), decisions, record)
            self._refuse_hidden_writes(admission.principal, classified, record)
        except Forbidden:
            discard_built(classified)  # files icegov wrote for a data operation it refuses
            raise
        record.decision = "allow"
        return Admission(admission.principal, admission.intent, admission.catalog, decisions,
                         tuple(classified))

    def recheck(self, coarse: Coarse, rights: Iterable[tuple[str, str]] | None,
                record: AuditRecord) -> None:
        """403 unless the caller still holds every (action, resource) right a stored answer
        was given on (a commit's classified actions): a replay answers nothing the same
        request would now be refused. A right naming a resource the request does not name
        is refused too. Rights unknown (``None``: an answer kept by an older icegov, for at
        most the key lifetime after an upgrade) need only the coarse decision already made: that
        answer was this principal's, and a refusal would tell a client whose commit landed that
        it failed (and invite it to commit again)."""
        if coarse.principal is None or rights is None:
            return
        named = {str(r): r for r in _resources(coarse.admission.intent)}
        needs = []
        for action, resource in rights:
            if resource not in named or action not in Action.__members__:
                record.decision = "deny"
                raise Forbidden(f"{coarse.principal.name} may not replay this answer")
            needs.append(Need(Action(action), named[resource]))
        self._check(coarse.principal, (), self._decide(coarse.principal, needs, record), record)

    def _governed_digest(self, principal: Principal, table: Resource,
                         metadata: TableMetadata) -> str | None:
        """The governed view ``principal`` reads ``table`` through (its digest), if any."""
        if self._views is None:
            return None
        view = self._views.view(principal, table, metadata)
        return governed_view(view, metadata).digest if governs(view) else None

    def _refuse_hidden_writes(self, principal: Principal, classified: list[ClassifiedChange],
                              record: AuditRecord) -> None:
        """403 for a change that would drop what the principal may not see: a rewrite of data
        files or a schema change by a column-restricted principal, an INSERT leaving a hidden
        required column empty, a removal of rows by a row-filtered one (``proxy.reads.writes``)."""
        for change in classified:
            if change.base is None or self._views is None:
                continue
            view = self._views.view(principal, change.resource, change.base.metadata)
            if not view.restricted:
                continue
            change.report["read_view"] = describe(view)
            updates = change.body.get("updates")
            refusal = write_refusal(view, change.intent.actions, change.base.metadata.schema(),
                                    changes_schema=changes_schema(updates)) or spec_refusal(
                view, updates, hidden_ids(change.base.metadata, view.hidden(False)))
            if refusal is not None:
                record.decision = "deny"
                raise Forbidden(refusal)

    async def _through_tables(self, inbound: InboundRequest, intent: Intent) -> None:
        """404 for a namespace that passes through a table (``proxy.gate.nesting``), asked of the
        backing only once the request is allowed."""
        resources = _resources(intent)
        if self._namespace_paths is not None and any(len(r.namespace) > 1 for r in resources):
            await self._namespace_paths.check(inbound, resources)

    def _refuse_shedding_rename(self, intent: Intent, record: AuditRecord) -> None:
        """403 for a rename that would move a table or view out of (or into) read rules: rules
        name tables and views, so the policy must say the same of both names first."""
        source, destination = (need.resource for need in intent.needs)
        if not self._authorizer.same_restrictions(source, destination):
            record.decision = "deny"
            raise Forbidden(f"column or row rules on {source.name} do not apply to "
                            f"{destination.name}: renaming would change what policy restricts "
                            "(write the same rules for the new name first)")

    def _refuse_hidden_operation(self, principal: Principal, record: AuditRecord,
                                 resource: Resource, body: dict[str, Any],
                                 metadata: TableMetadata) -> dict[str, Any] | None:
        """Judge a data operation before icegov builds it: a filter naming a column outside
        the principal's view is refused as one the table lacks (400, hidden or missing alike:
        ``proxy.reads.operation_names``), one whose equality deletes reach hidden columns, or
        that removes rows of a row-filtered principal, 403 (``operation_refusal``). Returns
        the body with case-insensitive filters respelled as the view names its columns (None
        when unchanged), which is what icegov builds."""
        if self._views is None:
            return None
        view = self._views.view(principal, resource, metadata)
        if not view.restricted:
            return None
        updates = body.get("updates")
        if not isinstance(updates, list):
            return None
        judged = [judged_operation(update, metadata.schema(), view) for update in updates]
        hidden = hidden_ids(metadata, view.hidden(False))
        for update in judged:
            refusal = operation_refusal(view, update, hidden) if isinstance(update, dict) \
                else None
            if refusal is not None:
                record.decision = "deny"
                raise Forbidden(refusal)
        if all(a is b for a, b in zip(judged, updates, strict=True)):
            return None
        return {**body, "updates": judged}

    def _admit_commit_coarse(self, principal: Principal, intent: Intent,
                             record: AuditRecord) -> None:
        for change in intent.changes:
            self._hide(principal, change.resource, record)
        coarse = tuple(self._may_commit(principal, c.resource) for c in intent.changes)
        record.decisions = coarse
        for decision in coarse:
            if not decision.allowed:
                record.decision = "deny"
                raise Forbidden(f"{principal.name} may not change {decision.resource}")

    def _decide(self, principal: Principal, needs: Iterable[Need],
                record: AuditRecord) -> tuple[Decision, ...]:
        decisions = tuple(self._authorizer.decide(principal, n.action, n.resource) for n in needs)
        record.decisions = decisions
        return decisions

    def _may_commit(self, principal: Principal, resource: Resource) -> Decision:
        """The first commit right the principal holds on the table, else a denial."""
        decisions = [self._authorizer.decide(principal, a, resource) for a in COMMIT_RIGHTS]
        allowed = [d for d in decisions if d.allowed]
        return allowed[0] if allowed else decisions[0]

    def _hide(self, principal: Principal, resource: Resource, record: AuditRecord) -> None:
        if self._authorizer.can_see(principal, resource):
            return
        record.decision = "hidden"
        missing = NoSuchTable if resource.is_table else NoSuchNamespace
        raise missing(f"{resource.name} does not exist")

    def _check(self, principal: Principal, hide: tuple[Resource, ...],
               decisions: tuple[Decision, ...], record: AuditRecord) -> None:
        denied = [d for d in decisions if not d.allowed]
        if not denied:
            return
        for resource in hide:
            self._hide(principal, resource, record)
        record.decision = "deny"
        first = denied[0]
        raise Forbidden(f"{principal.name} may not {first.action} on {first.resource}")


def _resources(intent: Intent) -> tuple[Resource, ...]:
    found = [n.resource for n in intent.needs] + [c.resource for c in intent.changes]
    return tuple(dict.fromkeys(found or intent.hide))


__all__ = ["COMMIT_RIGHTS", "Admission", "CatalogNames", "ClassifiedChange", "Coarse", "Gate"]
