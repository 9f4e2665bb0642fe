"""Authentication and authorization, sans-IO: what a broker needs for SASL and ACLs.

- `sasl.py`: one connection's SASL state machine (SaslHandshake, SaslAuthenticate, KIP-368).
- `scram.py`, `plain.py`: the SCRAM-SHA-256/512 and PLAIN mechanisms' server sides
  (`mechanism.py` is what they share).
- `acl.py`: ACLs, filters and the `Authorizer` (Kafka's StandardAuthorizer rules).
- `api_operations.py`: the operation and resource each Kafka API checks, and its denial.
- `enforcement.py`: the ruling on one request (which resources are denied; the request and
  answer rewritten for it); `principal.py`: a connection's principal (the SSL subject in RFC
  2253 form); `denials.py`: which denials to journal (one per key per window).

Nothing here reads a clock, draws random numbers or does I/O: time comes in as `now_ms`, and
randomness (SCRAM nonces) from a callable the daemon gives.

Import from the modules themselves: this package re-exports nothing, so a command that needs one
constant of `scram.py` does not load the authorizer and the SASL machines with it.
"""
