"""Server-side scan planning: requests, plans, plan tasks and their caches."""
