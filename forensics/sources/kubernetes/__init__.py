"""Kubernetes: `kubectl` as people paste it (event tables, describes, get pods) and its objects
as `-o json` / `-o yaml`."""
