"""``basketgnn serve``: next baskets over HTTP with their reasons, and a page to look at a
customer. A thin front end over :class:`basketgnn.workflow.serving.NextBaskets`:

- :mod:`~basketgnn.serve.app`: the ASGI app (endpoints, errors, admin reload).
- :mod:`~basketgnn.serve.worker`: the model slot and its atomic swap, the scoring thread.
- :mod:`~basketgnn.serve.schemas`: request bodies, limits, the JSON error format.
- :mod:`~basketgnn.serve.asgi`: ``app`` built from environment variables, for any ASGI server.
- :mod:`~basketgnn.serve.launch`: the real server in a child process on a loopback port (tests,
  benchmarks).
- ``page.html``: the page at ``/``.

Needs the ``serve`` extra: ``pip install 'basketgnn[serve]'``.
"""
