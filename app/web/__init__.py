"""Web edge: HTML templates (the report permalink); the upload UI comes later."""
