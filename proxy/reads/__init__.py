"""What a restricted principal is told about a table and may write to it: the loadTable
projection (``projection``), what of any backing answer it may receive (``disclosure``, over
the secret vocabulary of ``credentials``) and the write restrictions of the commit gate
(``writes``).

Pure functions over the catalog's JSON and pyiceberg types; no I/O.

Room: it also owns a principal's read view of a table across its schemas (``read_views``), the
checks a scan's columns and row filter pass (``scan_access``) and the tables a view's SQL names
(``view_refs``). It may import audit, catalog, backing, planning, commits, ops, defaults and the
shared vocabulary, nothing above.
"""
