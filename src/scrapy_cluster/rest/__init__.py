"""The Rest service: the cluster's API over HTTP, its live dashboard and Prometheus metrics.

``endpoints.create_app`` builds the ASGI application (FastAPI) around a
``service.RestService``, which owns the bus producer, the shared reader of the outbound topic
(``answer_router.AnswerRouter``) and the health checks; ``server.open_rest`` serves it with
uvicorn behind ``gate.Gate``. ``wire`` is the wire format. See ``docs/rest.md``.
"""
