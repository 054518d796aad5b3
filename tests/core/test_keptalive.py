"""Tool calls on the standard library's client (`egress.tool_request`, core/keptalive.py),
against a real HTTP/1.1 server on localhost: a call with a side effect on a fresh connection
every time, never kept; calls with no side effect (`reuse=True`) on kept-alive connections,
reused while fresh, never once the tool closed it or it idled past its second; and every new
connection checked by the egress policy."""

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from core import egress, keptalive


class Tool(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps the connection open unless told otherwise
    seen: list  # (client port, path, headers) per request
    close_after = False  # close the connection after answering, without saying so

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self.seen.append((self.client_address[1], self.path, dict(self.headers), body))
        answer = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        if self.close_after:
            self.close_connection = True

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(handler):
    """A real HTTP server on localhost with `handler`; its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def tool():
    handler = type("T", (Tool,), {"seen": []})
    with serving(handler) as url:
        yield handler, url


def call(url: str, body: bytes = b"{}", reuse: bool = True) -> httpx.Response:
    return egress.tool_request(
        "POST",
        httpx.URL(url),
        headers={"Content-Type": "application/json", "Mcp-Name": "search"},
        content=body,
        timeout=5,
        reuse=reuse,
    )


def test_a_call_with_no_side_effect_reuses_its_connection(tool):
    handler, base = tool
    first, second = call(f"{base}/mcp", b'{"n":1}'), call(f"{base}/mcp", b'{"n":2}')
    assert (first.status_code, first.json()) == (200, {"ok": True})
    assert second.headers["content-type"] == "application/json"
    assert first.http_version == "HTTP/1.1" and first.reason_phrase == "OK"
    (port1, path, headers, body1), (port2, _, _, body2) = handler.seen
    assert port1 == port2  # one connection
    assert (path, body1, body2) == ("/mcp", b'{"n":1}', b'{"n":2}')
    assert headers["Host"] == base.removeprefix("http://")
    assert headers["Mcp-Name"] == "search" and headers["User-Agent"].startswith("python-httpx/")


def test_a_call_with_a_side_effect_has_a_fresh_connection_every_time(tool):
    """However willing the tool is to keep a connection open, an effect's attempt never
    goes out on one that an earlier call used, nor leaves one behind for a later call."""
    handler, base = tool
    effect = {"Content-Type": "application/json"}
    for n in range(3):
        response = egress.tool_request(
            "POST", httpx.URL(f"{base}/effects"), headers=effect, content=b"{}", timeout=5
        )
        assert response.status_code == 200 and response.json() == {"ok": True}
    call(f"{base}/mcp")  # a read finds nothing kept by the effects either
    ports = [seen[0] for seen in handler.seen]
    assert len(set(ports)) == 4
    assert [seen[1] for seen in handler.seen] == ["/effects"] * 3 + ["/mcp"]


def test_a_connection_the_tool_closed_is_never_reused(tool):
    handler, base = tool
    handler.close_after = True
    assert call(f"{base}/mcp").status_code == 200
    assert call(f"{base}/mcp").status_code == 200  # not a failed send on the dead one
    assert handler.seen[0][0] != handler.seen[1][0]


def test_a_connection_closed_as_it_is_taken_is_sent_again_on_a_new_one(tool, monkeypatch):
    """The keep-alive race: the tool closes an idle connection just as it is taken (its
    close not seen yet). The call has no side effect, so it goes again on a new connection
    rather than failing; the dead connection never reached the tool."""
    handler, base = tool
    handler.close_after = True
    assert call(f"{base}/mcp").status_code == 200
    monkeypatch.setattr(keptalive, "_readable", lambda sock: False)  # the close not seen
    assert call(f"{base}/mcp").status_code == 200
    assert len(handler.seen) == 2
    assert handler.seen[0][0] != handler.seen[1][0]


def test_a_connection_idle_past_its_second_is_not_reused(tool, monkeypatch):
    handler, base = tool
    monkeypatch.setattr(keptalive, "IDLE_SECONDS", 0)
    call(f"{base}/mcp")
    call(f"{base}/mcp")
    assert handler.seen[0][0] != handler.seen[1][0]


@pytest.mark.parametrize("reuse", [True, False], ids=["no-side-effect", "effect"])
def test_a_new_connection_is_checked_against_the_policy(tool, monkeypatch, settings, reuse):
    """DNS rebinding, on a read's kept-alive path and an effect's fresh connection alike: a
    listed name that now resolves inward is refused before anything is sent (a connect
    error: provably not sent)."""
    handler, base = tool
    port = int(base.rsplit(":", 1)[1])
    settings.TOOL_URL_ALLOWLIST = "rebind.test"
    real = socket.getaddrinfo
    answer = {"rebind.test": "169.254.169.254"}

    def resolver(host, *args, **kwargs):
        if host in answer:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer[host], port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    with pytest.raises(httpx.ConnectError, match="egress refused"):
        call(f"http://rebind.test:{port}/mcp", reuse=reuse)
    settings.TOOL_URL_ALLOWLIST = "127.0.0.1/32"
    with pytest.raises(httpx.ConnectError, match="egress refused"):
        call(f"http://rebind.test:{port}/mcp", reuse=reuse)
    assert handler.seen == []
    answer["rebind.test"] = "127.0.0.1"
    assert call(f"http://rebind.test:{port}/mcp", reuse=reuse).status_code == 200


def test_a_refused_connection_is_a_connect_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        call(f"http://127.0.0.1:{free}/mcp")


def test_a_tool_that_drops_the_connection_without_answering_is_maybe_sent():
    """Sent, then the connection ends with no answer: a protocol error ("maybe sent"),
    never a connect error."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def drop():
        # Read the whole request (headers and the two-byte body) before closing: a close with
        # unread bytes is a reset, which the client reports as a read error instead.
        conn, _ = listener.accept()
        seen = b""
        while not seen.endswith(b"\r\n\r\n{}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            seen += chunk
        conn.close()

    threading.Thread(target=drop, daemon=True).start()
    try:
        with pytest.raises(httpx.RemoteProtocolError):
            call(f"http://127.0.0.1:{listener.getsockname()[1]}/mcp")
    finally:
        listener.close()


def test_a_header_http_cannot_carry_is_an_httpx_error_and_nothing_is_sent(tool):
    handler, base = tool
    with pytest.raises(httpx.LocalProtocolError):
        egress.tool_request(
            "POST",
            httpx.URL(f"{base}/mcp"),
            headers={"Mcp-Name": "a\r\nX-Injected: 1"},
            content=b"{}",
            timeout=5,
            reuse=True,
        )
    assert handler.seen == []


BLOCKS = [
    b"Content-Type: application/json\r\nContent-Length: 12\r\n\r\n",
    b"Server: BaseHTTP/0.6\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
    b"X-Empty:\r\nX-Pad:  \t v  \r\n\r\n",
    b"X-Latin: caf\xe9\r\nConnection: close\n\n",
    b"X-Folded: one\r\n two\r\nContent-Length: 3\r\n\r\n",  # obs-fold
    b"Content-Length : 3\r\nX-After: kept?\r\n\r\n",  # a space before the colon
    b"no colon here\r\nContent-Length: 3\r\n\r\n",
    b"From nobody\r\nContent-Length: 3\r\n\r\n",
    b":empty-name\r\n\r\n",
    b"X-Cr: a\rb\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"\r\n",
    b"Content-Length: 3\r\n",  # the connection ended inside the block
]


@pytest.mark.parametrize("block", BLOCKS)
def test_an_answer_s_headers_read_as_the_standard_parser_reads_them(block):
    """The header block of an answer (`keptalive._parse_headers`) is what
    `http.client.parse_headers` makes of it, odd blocks included: the same names, values
    and order, so framing (Content-Length, Transfer-Encoding, Connection) is decided alike."""
    import http.client
    import io

    ours = keptalive._parse_headers(http.client._read_headers(io.BytesIO(block)))
    standard = http.client.parse_headers(io.BytesIO(block))
    assert isinstance(ours, http.client.HTTPMessage)
    assert ours.items() == standard.items()
    for name in ("content-length", "transfer-encoding", "connection", "set-cookie"):
        assert ours.get_all(name) == standard.get_all(name)


def test_an_answer_is_framed_by_its_headers_chunked_or_not():
    """Through the real client and server: a chunked answer, a 204 and
    a 100 Continue before the answer are each read whole and exactly."""
    import http.server

    class Odd(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/chunked":
                self.wfile.write(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                    b"Content-Type: application/json\r\n\r\n"
                    b'5\r\n{"a":\r\n2\r\n1}\r\n0\r\n\r\n'
                )
            elif self.path == "/continue":
                self.wfile.write(
                    b"HTTP/1.1 100 Continue\r\nX-Ignored: yes\r\n\r\n"
                    b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-Folded: a\r\n b\r\n\r\nok"
                )
            else:
                self.wfile.write(b"HTTP/1.1 204 No Content\r\nX-Nothing: 1\r\n\r\n")

        def log_message(self, *args):
            pass

    with serving(Odd) as base:
        chunked = call(f"{base}/chunked")
        assert (chunked.status_code, chunked.json()) == (200, {"a": 1})
        continued = call(f"{base}/continue")
        assert (continued.status_code, continued.content) == (201, b"ok")
        assert continued.headers["x-folded"] == "a\r\n b"
        assert "x-ignored" not in continued.headers
        empty = call(f"{base}/empty")
        assert (empty.status_code, empty.content, empty.headers["x-nothing"]) == (204, b"", "1")
        assert call(f"{base}/chunked").json() == {"a": 1}  # the kept connection still frames


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/json",
        "text/plain; charset=iso-8859-1",
        'text/plain; charset="UTF-16"',
        "text/plain; charset=no-such-codec",
        "text/plain; charset=latin-1; charset=utf-8",
    ],
)
def test_an_answer_s_text_is_decoded_as_httpx_decodes_it(content_type):
    """Through the real client and server: the answer's encoding (worked out once per
    Content-Type, `keptalive._encoding_of`) and text are httpx's own for the same answer."""
    codec = {"iso-8859-1": "latin-1", '"UTF-16"': "utf-16"}.get(
        (content_type or "").rpartition("charset=")[2], "utf-8"
    )
    body = "café ☃ – done".encode(codec, errors="replace")

    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with serving(Answer) as base:
        ours = call(f"{base}/answer", reuse=False)
        with httpx.Client() as client:
            theirs = client.post(f"{base}/answer", content=b"{}")
    assert ours.headers.get("content-type") == theirs.headers.get("content-type")
    assert (ours.encoding, ours.text) == (theirs.encoding, theirs.text)
    assert ours.text == theirs.text != ""
