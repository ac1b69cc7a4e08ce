"""The REST API (FastAPI): `create_app()` in main.py; routes under /api/v1."""
