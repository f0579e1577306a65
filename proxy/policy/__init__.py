"""Access policy: Casbin model + rules file, compiled for fast decisions and hot-reloaded.

The policy language is described for policy authors in ``policies/README.md``. Entry points:

* ``PolicyAuthorizer`` -- the ``proxy.governance.Authorizer`` implementation (decide, can_see,
  read_view, generation, reload_if_changed, watch/watching, status);
* ``proxy.policy.decisions`` -- the same decisions as pure functions (``read_view``,
  ``table_verdicts``, ``column_verdict`` for column and row rules, ``proxy.policy.views``);
* ``PolicySettings`` -- nested as ``policy`` in the main settings;
* ``proxy.policy.cli.policy`` -- the ``icegov policy`` command group (check, explain, test).

Room: it may import reads, audit, catalog, backing, planning, commits, ops, defaults and the shared
vocabulary, nothing above (the gate and handlers decide through it).
"""

from proxy.policy.authorizer import PolicyAuthorizer, PolicyStatus
from proxy.policy.rules import PolicyError, Problem
from proxy.policy.settings import PolicySettings

__all__ = ["PolicyAuthorizer", "PolicyError", "PolicySettings", "PolicyStatus", "Problem"]
