"""Storage: SQLAlchemy 2 models, engine/session factories, migrations and typed repository functions."""
