"""Host setup as code: the reference guide's steps as an idempotent plan (show, apply, verify)."""
