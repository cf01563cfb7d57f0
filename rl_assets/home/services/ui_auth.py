"""The UI's secret: only whoever can read the home's token file reaches ``rl-assets dev``'s Dagster UI.

Jupyter's convention. The token is 32 random bytes (hex) in ``<home>/services/ui.token``, 0600, created once
and reused (a bookmarked login URL keeps working; delete the file for a new one). ``rl-assets dev`` prints the
login URL ``http://127.0.0.1:3000/?token=...``; opening it sets a cookie (HttpOnly, SameSite=Strict) and
redirects to the same page without the token. :class:`TokenGate` wraps Dagster's ASGI app and checks every
HTTP request and websocket upgrade *before* Dagster sees it. A request is let through when it carries

- the token in the query (``?token=``), or in an ``Authorization: Bearer <token>`` (or ``token <token>``)
  header, which scripts use; or
- the cookie, on a request that does not come from another site or origin: a cookie is sent by the browser
  whatever page made the request, so a page of another local user's server on ``127.0.0.1:<another port>``
  (the same *site*, which SameSite does not tell apart) must not be able to use it. Such a request
  (``Sec-Fetch-Site`` other than ``same-origin``/``none``, or an ``Origin`` other than the UI's) is refused 403.

Anything else is refused 401 (a websocket upgrade: closed before it is accepted, which the server answers 403).
Every comparison is constant-time. The token is never put on a command line (another user can read those).
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

from rl_assets.home.layout import Home, HomeError
from rl_assets.home.services.private_files import ensure_secret, read_secret

TOKEN_FILE = "ui.token"
TOKEN_PARAM = "token"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOGIN_PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>rl-assets dev: log in</title></head>
<body style="font-family: sans-serif; margin: 3em">
<h1>rl-assets dev</h1>
<p>This Dagster UI needs its token. Open the login URL that <code>rl-assets dev</code> printed, or paste
the token of the home's <code>services/ui.token</code> file:</p>
<form method="get" action="/"><input name="token" type="password" size="70" autofocus>
<button type="submit">Log in</button></form>
</body></html>
"""


def token_path(home: Home) -> Path:
    return home.services / TOKEN_FILE


def ensure_token(home: Home) -> str:
    """The home's UI token, generated (0600, exclusively) on first use; refused if the file is not ours alone."""
    home.services.mkdir(parents=True, exist_ok=True)
    path = token_path(home)
    try:
        return ensure_secret(path)
    except OSError as err:  # another owner, other bits than 0600, a symlink, not a file
        raise HomeError(f"the UI's token file {path}: {err}; remove it and run `rl-assets dev` again") from None


def read_token(path: Path) -> str:
    return read_secret(path)


def login_url(host: str, port: int, token: str) -> str:
    """What the owner opens: a wildcard bind address is shown as the loopback one."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/?{urllib.parse.urlencode({TOKEN_PARAM: token})}"


def cookie_name(port: int) -> str:
    """Per port: cookies are not told apart by port, and two homes' UIs may run side by side on one host."""
    return f"rl-assets-ui-{port}"


def cookie_value(token: str) -> str:
    """What the cookie holds: derived from the token (so the cookie jar does not hold the token itself)."""
    return hmac.new(token.encode(), b"rl-assets dev UI cookie", hashlib.sha256).hexdigest()


def _equal(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode())


def _headers(scope: Scope) -> dict[str, str]:
    """Request headers, lower-cased names; a repeated header keeps its last value (``Cookie`` is parsed apart)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _cookies(scope: Scope) -> list[tuple[str, str]]:
    found = []
    for name, value in scope.get("headers", []):
        if name.lower() != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            key, sep, val = part.strip().partition("=")
            if sep:
                found.append((key.strip(), val.strip()))
    return found


class TokenGate:
    """ASGI middleware: a request without the UI's token (or its cookie) never reaches ``app``."""

    def __init__(self, app: ASGIApp, token: str, port: int) -> None:
        if len(token) < 32:
            raise ValueError("the UI token is too short")
        self.app = app
        self.token = token
        self.cookie = cookie_name(port)
        self.cookie_value = cookie_value(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        query = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        headers = _headers(scope)
        if self._good(value for key, value in query if key == TOKEN_PARAM):  # the login URL, or its form
            if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
                await self._redirect_without_token(scope, query, send)
            else:
                await self.app(scope, receive, self._setting_cookie(send))
            return
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() in ("bearer", "token") and self._good([credentials.strip()]):  # a script
            await self.app(scope, receive, send)
            return
        if self._good_cookie(scope):
            if self._same_origin(headers):
                await self.app(scope, receive, send)
            else:
                await self._refuse(scope, receive, send, 403, b"rl-assets dev: a request from another site or origin\n")
            return
        await self._refuse(scope, receive, send, 401, LOGIN_PAGE)

    def _good(self, given: Iterable[str]) -> bool:
        return any(_equal(value, self.token) for value in given)

    def _good_cookie(self, scope: Scope) -> bool:
        return any(_equal(value, self.cookie_value) for name, value in _cookies(scope) if name == self.cookie)

    @staticmethod
    def _same_origin(headers: dict[str, str]) -> bool:
        """Not a request another page made: the browser's Fetch Metadata, else its ``Origin``, says so."""
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin = headers.get("origin")
        if origin is None:
            return True
        return origin != "null" and urllib.parse.urlsplit(origin).netloc == headers.get("host")

    def _set_cookie(self) -> tuple[bytes, bytes]:
        value = f"{self.cookie}={self.cookie_value}; Path=/; HttpOnly; SameSite=Strict"
        return b"set-cookie", value.encode()

    def _setting_cookie(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self._set_cookie()]}
            await send(message)

        return sending

    async def _redirect_without_token(self, scope: Scope, query: list[tuple[str, str]], send: Send) -> None:
        path = "/" + scope["path"].lstrip("/")  # never "//host": a redirect stays on this server
        rest = urllib.parse.urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
        location = urllib.parse.quote(path) + (f"?{rest}" if rest else "")
        headers = [
            (b"location", location.encode("latin-1")),
            self._set_cookie(),
            (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, body: bytes) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})  # before accept: the server answers 403
            return
        kind = b"text/html; charset=utf-8" if body.startswith(b"<!doctype") else b"text/plain; charset=utf-8"
        headers = [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        if status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="rl-assets dev"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
