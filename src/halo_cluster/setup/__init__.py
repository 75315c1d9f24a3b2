"""Host setup as code: the reference guide's steps, idempotent (show, apply, verify)."""
