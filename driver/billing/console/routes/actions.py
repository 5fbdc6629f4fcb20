"""POST /console/actions/{name}: an admin session's action, through the SQL API's function
(billing.console.actions), audited as api-key:<key id>."""

from __future__ import annotations

import psycopg
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from billing import db
from billing.console import actions as actions_mod
from billing.console.web import Console, Refused, back, safe_next


def routes(console: Console) -> list[BaseRoute]:
    database, clock = console.database, console.clock

    @console.handler
    async def act(request: Request, session) -> Response:
        form = await console.guarded_form(request, session)
        if not session["can_act"]:
            raise Refused(403, "this session may look but not act: log in with a key of the admin scope")
        action = actions_mod.BY_NAME.get(request.path_params["name"])
        if action is None:
            raise Refused(404, "no such action")
        target = form.get("id", "")
        if not target.isdigit() or len(target) > 18:
            raise Refused(422, "the form names no target")
        to = safe_next(form.get("back"))
        sigs = await console.signatures()
        sig = next((sigs[f] for f in action.functions if f in sigs), None)
        if sig is None:
            raise Refused(404, f"{action.label}: the SQL API of this database has no such function")
        where = {"action": action.name, "id": target}
        try:
            query, params = actions_mod.build_call(action, sig, int(target), form, clock.now(), session["key_id"])
            await database.mutate(console.actor(session), query, params)
        except actions_mod.ActionInputError:
            return back(to, error="action_input", **where)
        except psycopg.Error as exc:
            err = db.contract_error(exc)
            state = exc.sqlstate or ""
            if err is None and not state.startswith(("22", "23", "40")):
                raise
            code = ("action_conflict" if err is not None and err.code == "BL409" else
                    "action_not_found" if err is not None and err.code == "BL404" else
                    "action_retry" if state.startswith("40") else "action_invalid")
            return back(to, error=code, **where)
        finally:
            console.cache.clear()  # the overview's figures are read again
        return back(to, ok="action_done", **where)

    return [Route("/actions/{name}", act, methods=["POST"])]
