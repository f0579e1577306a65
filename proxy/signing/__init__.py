"""S3 remote signing: icegov signs the storage requests of engines that hold no warehouse key.

A loadTable answer to a caller on an ``s3://`` table advertises icegov's signer (Iceberg's
``s3-signer-open-api.yaml``) with a sealed, short-lived grant naming the table, the principal,
what it may read (the table's locations, or for a governed principal exactly the files its
governed snapshots list) and whether it may write. ``POST /v1/aws/s3/sign/{grant}`` then signs,
with icegov's own storage credentials, only reads of those objects and writes of new objects
under the table's locations; everything else is refused.

Owns: AWS Signature V4 (``sigv4``), the grant (``grants``), the parsed storage request
(``wire``), the decision (``decide``), the governed file sets (``readable``), the read audit
aggregation (``tally``) and the service the handler calls (``service``). It may import
``proxy.governed``, ``proxy.policy``, ``proxy.audit``, ``proxy.commits`` and the shared
vocabulary; never the edge, the gate or the handlers.
"""
