"""The REST API: Kafka Connect's, under /api/connect, so Connect clients work unchanged.

Paths, bodies, status codes and error shapes follow Kafka Connect 3.9's
ConnectorsResource, ConnectorPluginsResource and RootResource. Views are thin:
reads are queries, writes call ``connectors.actions``; bodies are built in
``entities``; ``status`` derives Connect's states and is shared with the UI.

Where this API knowingly differs from Connect, and why:

- Location headers are absolute URLs with our base path; Connect's
  "/connectors/{name}" would point outside /api/connect.
- ``GET /`` reports version "3.9.0-sinkadmin-<ours>": the Connect API version
  we match, qualified as vendors do.
- ``PUT /connector-plugins/{plugin}/config/validate`` without connector.class
  validates against the path's plugin instead of answering 400.
- Writes need the Django model permission the admin would ask for (add,
  change or delete connector); reads need only a login. Connect has no
  authorization of its own.
- Malformed JSON is a 400 (older Connect answered 500); names or task ids
  that no row can hold (NUL characters, ids over 2^31-1) are 404s.
- ``PUT /connectors/{name}/topics/reset`` is always 403 "Topic tracking reset
  is disabled.", as a Connect worker with reset disabled answers: the active
  topics come from the commit ledger, which only offset changes edit.
- ``/connectors/{name}/commits`` is ours: the commit ledger, cursor-paginated.
"""
