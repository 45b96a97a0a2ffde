"""A small OpenAI-compatible server on 127.0.0.1 for the hardening tests, serving `model` as it is told to: well,
or with a fault injected on purpose (`mode`), and recording every request it gets (path, headers). Also a
proxy sink (it answers as the server would, to requests in a proxy's absolute form) and a private CA whose
certificate lets the same server speak HTTPS."""

from __future__ import annotations

import datetime
import gzip
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

MODEL = "served"
INFLATED_BYTES = 96 * 2**20   # what the gzip-bomb mode's few kilobytes inflate to


def gzip_bomb() -> bytes:
    """INFLATED_BYTES of zeros, gzipped twice (`Content-Encoding: gzip, gzip`): a few kilobytes on the wire."""
    if not hasattr(gzip_bomb, "body"):
        zeros = gzip.compress(bytes(INFLATED_BYTES), compresslevel=9, mtime=0)
        gzip_bomb.body = gzip.compress(zeros, compresslevel=9, mtime=0)
    return gzip_bomb.body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json", extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj, status: int = 200) -> None:
        self._send(status, json.dumps(obj).encode())

    def do_GET(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        path, mode = urlsplit(self.path).path, self.server.mode
        if mode == "redirect":
            return self._send(302, b"", extra={"Location": self.server.redirect_to + path})
        if mode == "trickle":
            return self._trickle()
        if mode == "huge":
            return self._send(200, b" " * (2 * 2**20))
        if mode == "gzip-bomb":
            return self._send(200, gzip_bomb(), extra={"Content-Encoding": "gzip, gzip"})
        if path == "/v1/models" and mode == "many-models":   # bait and switch: the model gone, 100,000 others
            return self._json({"data": [{"id": f"model-{i:06d}"} for i in range(100_000)]})
        if path == "/v1/models":
            return self._json({"data": [{"id": MODEL, "owned_by": "x\x1b]52;c;aGk=\x07 [/bold]\n## heading",
                                         "max_model_len": 512}]})
        if path == "/metrics":
            return self._send(200, b"vllm:generation_tokens_total 3\n", "text/plain")
        self._send(404, b"{}")

    def do_POST(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        mode = self.server.mode
        if mode == "redirect":
            return self._send(307, b"", extra={"Location": self.server.redirect_to + urlsplit(self.path).path})
        if mode == "wrong-shape":
            return self._json({"choices": ["not a choice"]})
        if mode == "gzip-bomb":
            return self._send(200, gzip_bomb(), extra={"Content-Encoding": "gzip, gzip"})
        if mode == "deep-json":
            return self._send(200, b"[" * 100_000 + b"]" * 100_000)
        if mode == "stall":   # headers, then nothing
            return self._stall(body.get("stream"))
        if body.get("stream"):
            claimed = {"infinite-usage": 1e999, "usage-lies": 999_999_999}.get(mode, 2)
            usage = {"prompt_tokens": 2, "completion_tokens": claimed}
            chunks = [{"choices": [{"text": "a", "token_ids": [5]}]}, {"choices": [{"text": "b", "token_ids": [6]}]},
                      {"choices": [], "usage": usage}]
            text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            return self._send(200, text.encode(), "text/event-stream")
        if body.get("echo") and isinstance(body.get("prompt"), list):
            # prompt log-probabilities, one entry more than the ids sent where the server adds a BOS
            n = len(body["prompt"]) + (1 if mode == "adds-bos" else 0)
            return self._json({"choices": [{"text": "", "logprobs": {
                "tokens": ["t"] * n, "token_logprobs": [None] + [-0.5] * (n - 1),
                "top_logprobs": [None] + [{"t": -0.5}] * (n - 1)}}]})
        if mode == "lone-surrogate":
            return self._send(200, b'{"choices": [{"text": " Par\\ud800is", "finish_reason": "length"}]}')
        self._json({"choices": [{"text": " Paris", "logprobs": None, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1}})

    def _stall(self, stream: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.flush()
        time.sleep(30)

    def _trickle(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            for _ in range(200):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass


class Server:
    """Started on 127.0.0.1 at a free port; `url` its base URL; `seen` every request it got."""

    def __init__(self, mode: str = "ok", tls: ssl.SSLContext | None = None) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None   # a client that hung up (deadline, TLS refusal)
        self.httpd.mode, self.httpd.seen, self.httpd.redirect_to = mode, [], ""
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def seen(self) -> list:
        return self.httpd.seen

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def private_ca(tmp: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA made here (its certificate written to tmp/ca.pem) and a server TLS context for 127.0.0.1 that it
    signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    now = datetime.datetime.now(datetime.timezone.utc)
    def cert(subject, issuer, key, signer, ca: bool, san=None):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                            critical=True)
            builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        else:
            builder = builder.add_extension(san, critical=False).add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca_cert = cert(ca_name, ca_name, ca_key, ca_key, True)
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    leaf = cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), ca_name, leaf_key, ca_key,
                False, san)
    pem = serialization.Encoding.PEM
    (tmp / "ca.pem").write_bytes(ca_cert.public_bytes(pem))
    (tmp / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp / "leaf.key").write_bytes(leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / "leaf.pem", tmp / "leaf.key")
    return tmp / "ca.pem", context
