"""Prometheus: `/metrics` scrapes in the exposition text format, HTTP API query results, and the
exposition grammar they share (`promtext`)."""
