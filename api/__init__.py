"""The API under /api/v1/: personal tokens, the job routes in JSON, and the "API tokens" page that makes the tokens.

Token-only (no session, so no CSRF): `authentication.py` reads the token, `permissions.py` keeps users
in no organisation out, `errors.py` writes every error as `{"error": {...}}`; docs/api.md is the contract."""
