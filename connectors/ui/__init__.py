"""Read-side queries and figures for the web UI pages.

Views stay thin: each page asks one function here for what it shows, and
writes only through ``connectors.actions``.
"""
