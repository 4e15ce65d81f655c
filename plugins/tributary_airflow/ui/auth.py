"""Who may read the audit pages: an Airflow user, from the API server's JWT.

The token is a bearer header (RFC 6750 s2.1) or the UI's cookie. A missing, expired, forged or
unreadable token is a 401 with ``WWW-Authenticate: Bearer`` (RFC 6750 s3.1), never an error
page, for the JSON API and any client that presents a bearer header. A browser asking for a
page (``Accept: text/html``, no bearer header) is sent to Airflow's login page instead, with
``next`` leading back to the page it asked for.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import RedirectResponse

__all__ = ["LoginRequired", "login_redirect", "presented_token", "require_user"]

log = logging.getLogger("tributary.ui")


class LoginRequired(Exception):
    """A browser's page request without a valid session: answered by :func:`login_redirect`."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


def _unauthorized(detail: str, error: str | None = "invalid_token") -> HTTPException:
    """401 with the challenge RFC 6750 s3 requires; ``error`` only when a token was presented."""
    challenge = f'Bearer realm="tributary", error="{error}"' if error else 'Bearer realm="tributary"'
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": challenge})


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def presented_token(request: Request) -> str | None:
    """The bearer token (the scheme is case-insensitive) or else the UI's cookie."""
    # deferred: the API server's auth modules load only where requests are served (every
    # Airflow process imports the plugin; see require_user)
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    return _bearer(request) or request.cookies.get(COOKIE_NAME_JWT_TOKEN)


def _wants_login_page(request: Request) -> bool:
    """A browser's page request: HTML accepted, no bearer header, not the JSON API."""
    path = request.url.path[len(request.scope.get("root_path", "")) :]
    return (
        request.method == "GET"
        and not path.startswith("/api/")
        and _bearer(request) is None
        and "text/html" in request.headers.get("accept", "")
    )


def _refused(request: Request, exc: HTTPException) -> Exception:
    if _wants_login_page(request):
        query = f"?{request.url.query}" if request.url.query else ""
        return LoginRequired(f"{request.url.path}{query}")
    return exc


async def require_user(request: Request) -> Any:
    """An Airflow user from the API server's JWT.

    Airflow's ``resolve_user_from_token`` answers an invalid token 403 ("Invalid JWT token") and
    translates only pyjwt's ``InvalidTokenError``: anything else its validator or the auth
    manager raises would surface as a 500. Both mean the credentials did not authenticate, which
    RFC 6750 s3.1 answers 401 ``invalid_token`` (403 is for a valid token lacking scope). The
    reason is logged by type only: a token is a secret.
    """
    # deferred: the API server's security module, for requests only (see presented_token)
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    token = presented_token(request)
    if not token:
        raise _refused(request, _unauthorized("Not authenticated", error=None))
    try:
        user = await resolve_user_from_token(token)
    except HTTPException as exc:
        # Airflow: 401 for an expired token, 403 for any other invalid one
        raise _refused(request, _unauthorized("Token expired" if exc.status_code == 401 else "Invalid token")) from None
    except Exception as exc:  # the validator's own failure: still not an authenticated request
        log.warning("audit request refused: token validation raised %s", type(exc).__name__)
        raise _refused(request, _unauthorized("Invalid token")) from None
    request.state.airflow_user = user  # who the search runs as (routes_search.searcher)
    return user


async def login_redirect(request: Request, exc: Exception) -> RedirectResponse:
    """303 to Airflow's login page (its auth manager says where), coming back to the page asked for."""
    # deferred: the API server's auth manager, for requests only (see presented_token)
    from airflow.api_fastapi.app import get_auth_manager

    next_url = exc.next_url if isinstance(exc, LoginRequired) else "/tributary/"
    return RedirectResponse(get_auth_manager().get_url_login(next_url=next_url), status_code=303)
