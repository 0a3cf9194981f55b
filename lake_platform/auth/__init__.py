"""Principals' credentials for both serving surfaces (Flight SQL and REST, which never import
each other): ``service`` (logins, Bearer and service tokens, the failure throttle), ``tokens``
(the sealer: sealed tickets, handles and Bearer tokens) and ``keyfile`` (the embedded default's
sealing key file)."""
