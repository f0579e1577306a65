"""The backing catalog as icegov reaches it: the one forwarding path (``forward``), icegov's own
credentials towards it (``auth``), what it offers (``offers``), and one reader of table state
shared by commit classification, planning and commits (``tables``).

Room: it may import planning, commits, ops, defaults and the shared vocabulary, nothing above.
"""
