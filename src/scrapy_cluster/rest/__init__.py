"""The Rest service: the cluster's API over HTTP, its live dashboard and Prometheus metrics.

``app.create_app`` builds the ASGI application (FastAPI, served by uvicorn) around a
``service.RestService``, which owns the bus producer, the shared reader of the outbound topic
(``answers.AnswerRouter``) and the health checks. See ``docs/rest.md``.
"""
