"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) work offline: their assets come from the installed package
fastapi-offline through this app (api/docs_assets.py), not from a CDN.

Against a live ``labeldist serve``: the pages' HTML names only this server's URLs, each of which answers with the
package's bytes; then each page is opened in headless Chromium with every host but loopback cut off (a proxy that
refuses, and a resolver that resolves nothing). Over the DevTools protocol the test waits until the page has
rendered every operation of /openapi.json (a MutationObserver's promise, not a sleep), checks that every request
the page made went to the server and none failed, and saves a screenshot (``test-artifacts/docs-offline.png``,
``test-artifacts/redoc-offline.png``, as the page tests save theirs). A control shows that the cut-off holds:
FastAPI's stock CDN page, opened the same way, requests the CDN, is refused and renders nothing. Skipped, saying so,
where no Chromium is installed (as tests/api/test_api_ui.py).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from labeldist.api.docs_assets import FILES, STATIC_URL, assets_dir
from tests.api.api_helpers import ARTIFACTS, start_server, stop_server
from tests.api.test_api_ui import CHROMIUM, needs_chromium
from tests.processes import free_port, wait_healthy

TYPES = {".js": ("text/javascript", "application/javascript"), ".css": ("text/css",), ".png": ("image/png",)}
#: what Chromium says of a request to a host cut off: the proxy refuses, or the name resolves to nothing
BLOCKED = {"net::ERR_PROXY_CONNECTION_FAILED", "net::ERR_NAME_NOT_RESOLVED", "net::ERR_TUNNEL_CONNECTION_FAILED"}
WIDTH, HEIGHT = 1200, 900


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``labeldist serve`` over an empty stores folder: the docs describe the API, whatever the stores."""
    stores = tmp_path_factory.mktemp("docs-stores")
    port = free_port()
    proc = start_server(stores, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base)
        yield base
    finally:
        stop_server(proc)


def fetch(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.headers.get("content-type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read()


def response_headers(url: str) -> dict[str, str]:
    with urllib.request.urlopen(url, timeout=60) as r:
        return {k.lower(): v for k, v in r.headers.items()}


def openapi(base: str) -> dict:
    return json.loads(fetch(f"{base}/openapi.json")[2])


def referenced_urls(page: str) -> list[str]:
    """Every URL a docs page names: tags' src/href/spec-url, and the URLs in Swagger UI's inline script."""
    attributes = re.findall(r'\b(?:src|href|spec-url)="([^"]*)"', page)
    script = re.findall(r"\b(?:url|oauth2RedirectUrl): (?:window\.location\.origin \+ )?'([^']*)'", page)
    return attributes + script


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_page_names_only_this_server_and_each_url_answers(server: str, path: str) -> None:
    status, content_type, body = fetch(server + path)
    assert status == 200 and content_type.startswith("text/html")
    assert response_headers(server + path)["content-security-policy"] == "img-src 'self' data: blob:"
    page = body.decode()
    assert "http://" not in page and "https://" not in page and "//cdn" not in page, "no URL of another host"
    urls = referenced_urls(page)
    assets = [u for u in urls if u.startswith(f"{STATIC_URL}/")]
    expected = {
        "/docs": {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"},
        "/redoc": {"redoc.standalone.js", "favicon.png"},
    }[path]
    assert {u.rsplit("/", 1)[1] for u in assets} == expected
    assert "/openapi.json" in urls
    if path == "/docs":
        assert "/docs/oauth2-redirect" in urls
    folder = assets_dir()
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        status, content_type, body = fetch(server + url)
        assert status == 200, url
        if url in assets:
            suffix = Path(url).suffix
            assert content_type.split(";")[0] in TYPES[suffix], (url, content_type)
            assert body == (folder / Path(url).name).read_bytes(), "the installed package's file, as it is"
    assert fetch(f"{server}{STATIC_URL}/../docs_assets.py")[0] == 404
    assert fetch(f"{server}{STATIC_URL}/nothing.js")[0] == 404


def test_swagger_ui_oauth2_redirect_and_openapi_unchanged(server: str) -> None:
    status, content_type, body = fetch(f"{server}/docs/oauth2-redirect")
    assert status == 200 and content_type.startswith("text/html") and b"oauth2" in body
    schema = openapi(server)
    assert "/v1/stores" in schema["paths"]
    hidden = [p for p in schema["paths"] if p.startswith(("/docs", "/redoc", STATIC_URL, "/ui"))]
    assert hidden == [], "the docs routes stay out of the schema"


def test_a_missing_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import labeldist.api.docs_assets as docs_assets

    assert {p.name for p in assets_dir().iterdir()} >= set(FILES)
    monkeypatch.setattr(docs_assets, "PACKAGE", "fastapi_offline_not_installed")
    with pytest.raises(RuntimeError, match=r"pip install 'fastapi-offline"):
        docs_assets.assets_dir()


# --- in Chromium, offline --------------------------------------------------------------------------------------


class Browser:
    """Headless Chromium cut off from every host but loopback, driven over the DevTools protocol: one page, its
    requests and failures recorded."""

    def __init__(self, profile: Path) -> None:
        from websockets.sync.client import connect

        assert CHROMIUM is not None
        command = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{HEIGHT}",
            # the network is off: every request to another host goes to a proxy that refuses it (loopback is never
            # proxied), and no name resolves, but for 127.0.0.1
            "--proxy-server=http://127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--remote-debugging-port=0",
            "about:blank",
        ]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            self._connect(connect)
        except BaseException:
            self.proc.kill()
            self.proc.wait(timeout=30)
            raise

    def _connect(self, connect: Any) -> None:
        self.log: list[str] = []
        assert self.proc.stderr is not None
        for line in self.proc.stderr:  # Chromium prints where its DevTools listen, then goes on logging
            self.log.append(line)
            if line.startswith("DevTools listening on "):
                browser_ws = line.split(" on ", 1)[1].strip()
                break
        else:
            raise RuntimeError(f"chromium exited with {self.proc.wait()}:\n{''.join(self.log)[-2000:]}")
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()  # type: ignore[arg-type]
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(browser_ws, proxy=None, max_size=None, open_timeout=60))
        self.ids = itertools.count(1)
        self.requests: dict[str, str] = {}  # request id -> URL
        self.failed: dict[str, str] = {}  # URL -> error
        self.pending: set[str] = set()  # ids of requests over the network neither finished nor failed yet
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Network.enable", session=True)
        self.send("Page.enable", session=True)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=WIDTH,
            height=HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )

    def send(self, method: str, session: bool = False, timeout: float = 90, **params: Any) -> dict:
        """One DevTools command; the events that come before its answer are recorded on the way."""
        message: dict[str, Any] = {"id": next(self.ids), "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            answer = json.loads(self.ws.recv(timeout=timeout))
            if answer.get("id") == message["id"]:
                assert "error" not in answer, (method, answer["error"])
                return answer["result"]
            self.record(answer)

    def record(self, event: dict) -> None:
        params = event.get("params", {})
        if event.get("method") == "Network.requestWillBeSent":
            url = self.requests[params["requestId"]] = params["request"]["url"]
            if url.startswith(("http:", "https:")):  # not data: nor blob: (ReDoc's worker reports no end)
                self.pending.add(params["requestId"])
        elif event.get("method") in ("Network.loadingFinished", "Network.loadingFailed"):
            self.pending.discard(params["requestId"])
        if event.get("method") == "Network.loadingFailed":
            error = params["errorText"] + (f" ({params['blockedReason']})" if "blockedReason" in params else "")
            self.failed[self.requests.get(params["requestId"], "?")] = error

    def settled(self, timeout: float = 90) -> None:
        """Read the browser's events until every request seen so far has finished or failed."""
        while self.pending:
            try:
                self.record(json.loads(self.ws.recv(timeout=timeout)))
            except TimeoutError:
                raise TimeoutError(
                    f"unfinished after {timeout} s: {[self.requests[r] for r in self.pending]}"
                ) from None

    def open(self, url: str) -> None:
        """Navigate; the answer comes once the document is committed (what it loads is waited for by the caller)."""
        result = self.send("Page.navigate", session=True, url=url)
        assert "errorText" not in result, result

    def until(self, predicate: str, timeout: float = 90) -> Any:
        """Wait until the JavaScript expression ``predicate`` is truthy in the page, re-evaluated on every DOM
        change (a MutationObserver), and return its value. TimeoutError if it never is."""
        expression = f"""new Promise(resolve => {{
            const check = () => {{
                const value = ({predicate});
                if (value) {{ observer.disconnect(); resolve(value); }}
            }};
            const observer = new MutationObserver(check);
            observer.observe(document, {{childList: true, subtree: true, characterData: true, attributes: true}});
            check();
        }})"""
        result = self.send(
            "Runtime.evaluate",
            session=True,
            timeout=timeout,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def loaded(self, timeout: float = 90) -> None:
        """Wait for the page's load event: every script, style sheet and image it names loaded or failed."""
        self.evaluate(
            "new Promise(resolve => document.readyState === 'complete' ? resolve(true)"
            " : addEventListener('load', () => resolve(true)))",
            timeout=timeout,
        )

    def evaluate(self, expression: str, timeout: float = 90) -> Any:
        result = self.send(
            "Runtime.evaluate",
            session=True,
            timeout=timeout,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def screenshot(self, path: Path) -> np.ndarray:
        from PIL import Image

        data = self.send("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        image = np.asarray(Image.open(path).convert("RGB")).astype(int)
        assert image.shape == (HEIGHT, WIDTH, 3)
        return image

    def close(self) -> None:
        try:
            self.ws.send(json.dumps({"id": next(self.ids), "method": "Browser.close"}))
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
            self.proc.wait(timeout=30)
        finally:
            self.stack.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "chromium-profile")
    try:
        yield b
    finally:
        b.close()


def save(shot: Path) -> None:
    """A copy of a screenshot taken in the test's folder, in test-artifacts/ as the page tests keep theirs."""
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / shot.name)


def only_this_server(browser: Browser, base: str) -> dict[str, str]:
    """Every request of the page over the network went to this server and succeeded, but for requests to other
    hosts that the page's Content-Security-Policy refused inside the browser (never sent); those, by URL."""
    browser.settled()
    host = urllib.parse.urlsplit(base).netloc
    network = {u for u in browser.requests.values() if urllib.parse.urlsplit(u).scheme in ("http", "https")}
    elsewhere = {
        u: browser.failed.get(u, "sent: not refused by the page's policy")
        for u in network
        if urllib.parse.urlsplit(u).netloc != host
    }
    assert all(error.endswith("(csp)") for error in elsewhere.values()), f"requests to other hosts: {elsewhere}"
    failed = {u: e for u, e in browser.failed.items() if u not in elsewhere}
    assert failed == {}, f"requests that failed: {failed}"
    return elsewhere


@needs_chromium
def test_swagger_ui_renders_offline(server: str, browser: Browser, tmp_path: Path) -> None:
    paths = sorted(openapi(server)["paths"])
    assert "/v1/stores" in paths and len(paths) >= 8
    browser.open(f"{server}/docs")
    shown = browser.until(
        f"""(() => {{
            const shown = [...new Set([...document.querySelectorAll('.opblock-summary-path[data-path]')]
                .map(e => e.getAttribute('data-path')))].sort();
            const expected = {json.dumps(paths)};
            return shown.length === expected.length && expected.every(p => shown.includes(p)) && shown;
        }})()"""
    )
    assert shown == paths, "every path of /openapi.json, rendered by Swagger UI"
    text = browser.evaluate("document.body.innerText")
    assert "labeldist" in text and "/v1/stores" in text
    assert browser.evaluate("document.querySelector('.swagger-ui .info .title') !== null")
    requested = set(browser.requests.values())
    assert {
        f"{server}/docs",
        f"{server}{STATIC_URL}/swagger-ui-bundle.js",
        f"{server}{STATIC_URL}/swagger-ui.css",
        f"{server}/openapi.json",
    } <= requested
    assert only_this_server(browser, server) == {}
    shot = tmp_path / "docs-offline.png"
    image = browser.screenshot(shot)
    get_blue = (np.abs(image - [97, 175, 254]).sum(axis=2) < 30).sum()  # Swagger UI's GET badges and borders
    post_green = (np.abs(image - [73, 204, 144]).sum(axis=2) < 30).sum()  # its POST badges
    assert get_blue > 2000 and post_green > 500, (get_blue, post_green)
    save(shot)


@needs_chromium
def test_redoc_renders_offline(server: str, browser: Browser, tmp_path: Path) -> None:
    schema = openapi(server)
    operations = sorted(op["operationId"] for methods in schema["paths"].values() for op in methods.values())
    browser.open(f"{server}/redoc")
    shown = browser.until(
        f"""(() => {{
            const ids = {json.dumps(operations)};
            const shown = ids.filter(id => document.querySelector(`[data-section-id="operation/${{id}}"]`));
            return shown.length === ids.length && shown;
        }})()"""
    )
    assert sorted(shown) == operations, "every operation of /openapi.json, rendered by ReDoc"
    text = browser.evaluate("document.body.innerText")
    assert "/v1/stores" in text and "labeldist" in text
    requested = set(browser.requests.values())
    assert {f"{server}/redoc", f"{server}{STATIC_URL}/redoc.standalone.js", f"{server}/openapi.json"} <= requested
    # ReDoc's menu asks for Redocly's logo from its CDN: refused by the page's policy, never sent, and not shown
    assert set(only_this_server(browser, server)) <= {"https://cdn.redoc.ly/redoc/logo-mini.svg"}
    assert browser.until("document.querySelectorAll('img[src^=\"http\"]').length === 0 && 'none shown'") == "none shown"
    shot = tmp_path / "redoc-offline.png"
    image = browser.screenshot(shot)
    inked = (image.sum(axis=2) < 300).mean()  # text and labels, not a blank page
    assert inked > 0.01, inked
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 50
    save(shot)


@needs_chromium
def test_the_cut_off_holds_fastapis_cdn_page_stays_blank(server: str, browser: Browser, tmp_path: Path) -> None:
    """The control: FastAPI's own /docs page (its CDN URLs), opened the same way, cannot load Swagger UI."""
    from fastapi.openapi.docs import get_swagger_ui_html

    page = tmp_path / "cdn-docs.html"
    page.write_bytes(get_swagger_ui_html(openapi_url=f"{server}/openapi.json", title="CDN").body)
    browser.open(page.as_uri())
    browser.loaded()
    browser.settled()
    cdn = {u: e for u, e in browser.failed.items() if urllib.parse.urlsplit(u).netloc == "cdn.jsdelivr.net"}
    assert any(u.endswith("/swagger-ui-bundle.js") for u in cdn), browser.failed
    assert set(cdn.values()) <= BLOCKED, cdn
    assert browser.evaluate("typeof SwaggerUIBundle") == "undefined"
    assert browser.evaluate("document.querySelectorAll('.opblock').length") == 0
