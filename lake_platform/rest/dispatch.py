"""The commit path's operations dispatched ahead of Starlette's router.

A Lance client's commit is three requests (DescribeTable, ListTableVersions, CreateTableVersion),
each a ``POST /v1/table/{id}/<action>``. Starlette finds a route by trying each route's regular
expression in turn behind two middlewares of its own; for these few this finds the same route by
one dictionary lookup and calls its endpoint (the same object the router would call) with the
scope the router would have built (``route``, ``endpoint``, ``path_params``). Everything else — a
non-hot operation, another method, a path the lookup does not take exactly — goes to Starlette
unchanged, so its answers (and its problem bodies) are the router's own.
"""

from __future__ import annotations

from typing import Any

from starlette.routing import Route

from lake_platform.observability.asgi import App, Receive, Scope, Send

TABLE_PREFIX = "/v1/table/"


class HotRoutes:
    def __init__(self, app: App, routes: list[Route], names: tuple[str, ...]) -> None:
        """``routes``: the router's own, in its order; ``names``: the operations to take here,
        which must be the router's first routes (so no route before them could match first)."""
        self.app = app
        first = routes[: len(names)]
        if [route.name for route in first] != list(names):
            raise ValueError(f"the hot routes {names} must come first in the router")
        #: action (what follows ``/v1/table/{id}/``) -> its POST route.
        self.routes: dict[str, Route] = {}
        for route in first:
            action = hot_action(route)
            if action is None:
                raise ValueError(f"{route.name} is not a POST /v1/table/{{id}}/<action> route")
            self.routes[action] = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.match(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        ident = scope["path"][len(TABLE_PREFIX) :].partition("/")[0]
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {"id": ident}
        await route.endpoint(scope, receive, send)

    def match(self, scope: Scope) -> Route | None:
        """The route Starlette would match, or None to let Starlette decide (which it then does
        exactly as without this). Only a path of the form ``/v1/table/<id>/<action>`` with a
        non-empty id free of ``/`` and an action in the table, under no root path, is taken."""
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            return None
        path: str = scope["path"]
        if not path.startswith(TABLE_PREFIX):
            return None
        ident, slash, action = path[len(TABLE_PREFIX) :].partition("/")
        if not ident or not slash:
            return None
        return self.routes.get(action)


def hot_action(route: Any) -> str | None:
    """The action of a ``POST /v1/table/{id}/<action>`` route whose id is a plain path segment
    (Starlette's default ``str`` convertor, ``[^/]+``) and whose endpoint is an ASGI app."""
    path = getattr(route, "path", "")
    head = TABLE_PREFIX + "{id}/"
    if not path.startswith(head) or route.methods != {"POST"} or "{" in path[len(head) :]:
        return None
    if route.param_convertors.get("id").__class__.__name__ != "StringConvertor":
        return None
    return path[len(head) :]
