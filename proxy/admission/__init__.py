"""What the gate hands on: a request's typed intent as actions on validated resources (``intent``),
the ``Admission`` a handler acts on with each table's classified change and the base it was
judged on (``admission``) and the catalog a ``{prefix}`` names (``catalogs``). Services read it,
so it sits below them: it may import idempotency, identity, policy, reads, audit, the embedded
catalog's wire forms, backing, planning, commits, ops and the shared vocabulary, nothing above.
"""
