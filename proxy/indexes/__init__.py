"""Secondary indexes: bloom filters of a table's data files (``icegov.index.bloom-filter-columns``).

Owns: where filters lie and what a stored one must say to be believed (``store``), building them
from Parquet data files (``build``, in process or on PySpark: ``spark_build``), the live files and
filters a table should have (``files``) and the service that keeps them current off the commit
path and hands planning a pruner (``service``). It may import the shared vocabulary,
``proxy.commits``' property check and ``proxy.planning``'s bloom filters, Puffin files, pruner and
manifest cache; never the edge, the gate, the handlers or the planning service.
"""
