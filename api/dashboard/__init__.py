"""The dashboard's parts: browser sessions, its own aggregate queries, chart geometry, page data and templates.

The routes live in `api.routes.dashboard`; the templates in `api/templates/dashboard/` and the
stylesheet in `api/static/` ship as package data.
"""
