"""Metrics, structured logs and the query audit trail: shared by the Flight SQL endpoint, the
REST catalog and the layers under them. Imports nothing heavier than prometheus_client."""
