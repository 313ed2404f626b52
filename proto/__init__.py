"""Protocol definitions (.proto) and their generated modules."""
