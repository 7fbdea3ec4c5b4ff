"""The front's ASGI application: one OpenAI-compatible address for every profile of a pool.

Routes (Starlette):

* ``GET /v1/models``: every profile's served name, loaded or not (``kvpilot.state`` says which);
  ``GET /v1/models/{id}`` one of them.
* ``POST /v1/...`` (chat completions, completions, embeddings, responses, ...): the body's
  ``model`` picks the profile; the request waits until its server is up
  (:meth:`~kvpilot.core.front.pool.Pool.acquire`) and is then passed through, the answer streamed
  back as it comes (server-sent events are not buffered).
* ``GET /health``: 200 while the front runs; ``GET /front/status``: the pool's status.

Errors are OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, with the reason:
an unknown model, a full queue, a profile that could not start (its failure kind as kvpilot
classifies vLLM's log), a server that went away. With an API key, every ``/v1`` and ``/front``
route needs ``Authorization: Bearer KEY``, as vLLM asks it of ``/v1`` routes.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kvpilot.core.front.pool import FrontError

if TYPE_CHECKING:
    from kvpilot.core.front.pool import Pool, Slot

log = logging.getLogger(__name__)

#: headers that describe one hop of the connection, not the answer (RFC 9110 section 7.6.1)
_HOP_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "content-length", "host", "authorization",
})
#: a request body larger than this is refused (a prompt of many images stays far below)
MAX_BODY_BYTES = 64 << 20


def error_response(status: int, kind: str, code: str, message: str) -> JSONResponse:
    """An OpenAI-style error answer."""
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}},
        status_code=status,
    )


def _front_error(exc: FrontError) -> JSONResponse:
    return error_response(exc.status, exc.kind, exc.code, exc.message)


def build_app(pool: Pool, *, api_key: str | None = None) -> Starlette:
    """The Starlette application serving ``pool``; ``api_key`` (None: none) guards ``/v1`` and
    ``/front``."""

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await pool.open()
        client = httpx.AsyncClient(
            trust_env=False,
            timeout=httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
        )
        app.state.client = client
        try:
            yield
        finally:
            await pool.close()
            await client.aclose()

    def authorized(request: Request) -> bool:
        if not api_key:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode())

    def unauthorized() -> JSONResponse:
        return error_response(401, "invalid_request_error", "invalid_api_key",
                              "this front needs an API key: send Authorization: Bearer KEY")

    async def health(_request: Request) -> Response:
        return Response(status_code=200)

    async def status(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        return JSONResponse(pool.status())

    def model_entry(slot: Slot) -> dict[str, Any]:
        return {
            "id": slot.member.served_name,
            "object": "model",
            "created": 0,
            "owned_by": "kvpilot",
            "kvpilot": {"profile": slot.name, "state": slot.state},
        }

    async def models(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        return JSONResponse({"object": "list",
                             "data": [model_entry(s) for s in pool.slots.values()]})

    async def one_model(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        try:
            slot = pool.lookup(request.path_params["model"])
        except FrontError as exc:
            return _front_error(exc)
        return JSONResponse(model_entry(slot))

    async def forward(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return error_response(413, "invalid_request_error", "body_too_large",
                                  f"the request body is over {MAX_BODY_BYTES >> 20} MiB")
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            return error_response(400, "invalid_request_error", "invalid_json",
                                  "the request body is not JSON")
        model = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(model, str) or not model:
            names = ", ".join(s.member.served_name for s in pool.slots.values())
            return error_response(400, "invalid_request_error", "model_required",
                                  f"the request names no model; name one of: {names}")
        try:
            slot = await pool.acquire(model)
        except FrontError as exc:
            return _front_error(exc)
        client: httpx.AsyncClient = request.app.state.client
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        headers["authorization"] = f"Bearer {pool.key}"
        url = f"{slot.base_url}{request.url.path}"
        if request.url.query:
            url += f"?{request.url.query}"
        upstream = client.build_request(request.method, url, headers=headers, content=body)
        try:
            reply = await client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            pool.release(slot)
            return error_response(502, "server_error", "upstream_unavailable",
                                  f"the server of profile {slot.name!r} did not answer: {exc}")

        released = False

        async def passed_through() -> AsyncIterator[bytes]:
            nonlocal released
            try:
                async for chunk in reply.aiter_raw():
                    yield chunk
            finally:  # also when the client went away mid-stream
                await reply.aclose()
                if not released:
                    released = True
                    pool.release(slot)

        out_headers = {k: v for k, v in reply.headers.items() if k.lower() not in _HOP_HEADERS}
        return StreamingResponse(passed_through(), status_code=reply.status_code,
                                 headers=out_headers)

    async def not_found(request: Request) -> Response:
        return error_response(404, "invalid_request_error", "not_found",
                              f"{request.method} {request.url.path} is not served here; the "
                              "front serves /v1/models and the /v1 inference routes")

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/front/status", status, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", one_model, methods=["GET"]),
        Route("/v1/{rest:path}", forward, methods=["POST"]),
        Route("/{rest:path}", not_found,
              methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    return app
