"""The backing catalog as icegov reaches it: what it offers (``offers``), and one reader of table
state shared by commit classification, planning and commits (``tables``)."""
