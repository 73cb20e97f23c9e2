"""``app`` for any ASGI server, configured by environment variables
(:meth:`~basketgnn.serve.app.ServeSettings.from_env`): BASKETGNN_CHECKPOINT (required),
BASKETGNN_DATA, BASKETGNN_BLOCKED, BASKETGNN_DEVICE, BASKETGNN_THREADS; admin endpoints need
BASKETGNN_ADMIN_KEY. The model loads at startup, before the first request is accepted.

Example: ``BASKETGNN_CHECKPOINT=best.pt gunicorn -k uvicorn.workers.UvicornWorker -w 2
basketgnn.serve.asgi:app``.
"""

from basketgnn.serve.app import create_app
from basketgnn.serve.settings import ServeSettings

app = create_app(ServeSettings.from_env())
