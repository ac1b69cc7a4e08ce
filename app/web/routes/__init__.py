"""The web pages' routers, one module per page (listed in `app.web.edge.PAGES`)."""
