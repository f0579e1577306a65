"""What a restricted principal is told about a table and may write to it: the loadTable
projection (``projection``), what of any backing answer it may receive (``disclosure``, over
the secret vocabulary of ``credentials``) and the write restrictions of the commit gate
(``writes``).

Pure functions over the catalog's JSON and pyiceberg types; no I/O.
"""
