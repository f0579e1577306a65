"""The audit stream: one sealed JSON line per decision, to stdout and/or a rotating file.

``record`` says what one record holds, ``chain`` how records are linked and sealed (seq, prev,
hash), ``files`` how the file sink rotates and resumes, ``log`` how records are written (and
when mutating requests are refused because they cannot be), ``verify`` how a stream is checked
(``icegov audit verify``) and ``anchors`` how records known from elsewhere pin it.
``ocsf`` gives a record as an OCSF event, ``ocsf_sink`` writes those events beside the chain
(``ICEGOV__AUDIT__OCSF_FILE``) and ``ocsf_export`` writes audit files as OCSF Parquet for
Security Lake (``icegov audit export-ocsf``). ``digests`` writes signed digests of the files
(Ed25519 keys: ``signing``) and ``proofs`` checks files against them with the public key alone
(``icegov audit verify --public-key``, ``verify_digests``).
The record's JSON Schema ships as ``record-v2.schema.json``.

Room: it also owns the notes a record keeps of what a request asks for beyond its rights
(``notes``) and the ``icegov audit`` commands (``cli``). It may import catalog, backing, planning,
commits, ops, defaults and the shared vocabulary, nothing above.
"""

from proxy.audit.log import AuditLog, AuditUnavailable, is_mutating
from proxy.audit.record import AuditRecord
from proxy.audit.settings import AuditSettings

__all__ = ["AuditLog", "AuditRecord", "AuditSettings", "AuditUnavailable", "is_mutating"]
