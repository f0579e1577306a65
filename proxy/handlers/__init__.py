"""icegov's own answers, one module per endpoint family: catalog config (``config``), loadTable and
table metadata (``tables``), commits and transactions (``commits``), planning endpoints
(``plans``), views (``views``), storage credentials (``credentials``), health and readiness
(``health``). Each is a thin adapter that acts on an ``Admission`` from the gate. They may import
the services below them (plans, committer, admission, reads, policy, backing, ...) and the
shared vocabulary, never the gate or the edge.
"""
