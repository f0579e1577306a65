"""gate room (docstring follows in the next commit)."""
