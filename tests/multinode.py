"""A Ray cluster of several nodes on this machine, started as a user starts one (`ray start --head`, then
`ray start --address` per node, each with its own --temp-dir, resources and environment), and a local S3 server
(moto's server mode) on 127.0.0.1 with a bucket created as a user creates one (boto3).

`ray start` on Linux registers a node at the machine's reachable address even when asked for 127.0.0.1 (Ray
replaces a loopback address on purpose); packets to the machine's own address never leave it."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import psutil

RAY = Path(sys.executable).with_name("ray")
SECRET = "quant-test-secret-K3y"   # grepped for in everything a sweep writes: it must appear nowhere
OBJECT_STORE_BYTES = 100 * 2**20
# How soon the GCS declares a lost node dead, which a test that loses a node waits for. Ray checks every 3 s, gives
# each check 10 s and gives up after 5 misses (15 s at least); here every 1 s, 3 s each, after 3 misses (a raylet
# slowed by a loaded machine answers a health check well within 3 s).
HEALTH_CHECKS = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
                 "RAY_health_check_timeout_ms": "3000", "RAY_health_check_failure_threshold": "3"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(pids: list[int]) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                found[p.pid] = p
        except psutil.NoSuchProcess:
            pass
    return list(found.values())


@dataclass
class Node:
    name: str
    temp_dir: Path
    env: dict
    resources: dict = field(default_factory=dict)

    def processes(self) -> list[psutil.Process]:
        """This node's raylet, GCS, agents and workers: every process naming its temp dir, and their children."""
        roots = []
        for proc in psutil.process_iter(["cmdline"]):
            if str(self.temp_dir) in " ".join(proc.info["cmdline"] or []):
                roots.append(proc.pid)
        return tree(roots)

    def node_id(self) -> str:
        """The raylet's node id, from its log (the test process is no driver of the cluster)."""
        log = self.temp_dir / "session_latest" / "logs" / "raylet.out"
        found = re.findall(r"Raylet of id, ([0-9a-f]+) started", log.read_text())
        return found[-1]


class Cluster:
    """Nodes under a short root (Ray's socket paths must fit 107 bytes); env: what every node's processes see."""

    def __init__(self, env: dict) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rq", dir="/tmp"))
        self.env = env
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, Node] = {}

    def _start(self, nodes: list[tuple[Node, list[str]]]) -> None:
        """`ray start` for each (node, flags), all at once (as on separate machines); returns when all joined."""
        started = []
        for node, flags in nodes:
            ports = ["--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port()),
                     "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats"]
            cmd = [str(RAY), "start", "--node-ip-address", "127.0.0.1", "--temp-dir", str(node.temp_dir),
                   "--resources", json.dumps(node.resources), *ports, *flags]
            started.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                            env={**self.env, **HEALTH_CHECKS, **node.env}))
            self.nodes[node.name] = node   # stop() ends what it started, whatever becomes of the others
        for proc in started:
            _, err = proc.communicate(timeout=180)
            if proc.returncode:
                raise RuntimeError(f"ray start failed: {err[-2000:]}")

    def start_head(self, cpus: int = 0) -> None:
        node = Node("head", self.root / "head", {})
        self._start([(node, ["--head", "--port", str(self.port), "--num-cpus", str(cpus), "--include-dashboard",
                             "false", "--ray-client-server-port", str(free_port()), "--dashboard-port",
                             str(free_port())])])

    def add_nodes(self, nodes: dict[str, tuple[int, dict, dict]]) -> None:
        """name -> (CPUs, environment, custom resources) of each node joining the head."""
        self._start([(Node(name, self.root / name, env, resources), ["--address", self.address, "--num-cpus",
                                                                     str(cpus)])
                     for name, (cpus, env, resources) in nodes.items()])

    def kill(self, name: str) -> None:
        """The node is lost: every process of it SIGKILLed at once (a machine that went away)."""
        procs = self.nodes[name].processes()
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=30)

    def stop(self) -> None:
        """The other nodes first (all at once), the head last, as `ray stop` would (but only this cluster's
        processes); what has not ended 5 s after SIGTERM is killed."""
        for names in ([n for n in self.nodes if n != "head"], ["head"]):
            procs = tree([p.pid for n in names if n in self.nodes for p in self.nodes[n].processes()])
            for proc in procs:
                try:
                    proc.terminate()
                except psutil.NoSuchProcess:
                    pass
            _, alive = psutil.wait_procs(procs, timeout=5)
            for proc in alive:
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


class S3Server:
    """moto's S3 server on 127.0.0.1 with one bucket; env(): the standard AWS variables a client reads."""

    BUCKET = "quant-bucket"

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)   # a line per request otherwise
        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        import boto3

        self.client = boto3.session.Session(**self.credentials()).client("s3", endpoint_url=self.endpoint)
        self.client.create_bucket(Bucket=self.BUCKET)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def credentials() -> dict:
        return {"aws_access_key_id": "quant-test-key", "aws_secret_access_key": SECRET, "region_name": "us-east-1"}

    def env(self) -> dict:
        """As a user configures boto3 (botocore reads AWS_ENDPOINT_URL); no profile file of the user's is read."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "quant-test-key",
                "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true"}   # no instance-role lookup off this machine

    def objects(self, prefix: str) -> dict[str, tuple[str, float]]:
        """key -> (ETag, LastModified) under prefix."""
        found = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.BUCKET, Prefix=prefix):
            for obj in page.get("Contents", []):
                found[obj["Key"]] = (obj["ETag"], obj["LastModified"].timestamp())
        return found

    def stop(self) -> None:
        self.server.stop()


class Outage:
    """A TCP relay in front of the S3 server that goes away and comes back: its connections are cut and new ones
    refused while it is down (to a client, the server stopped); the server keeps its objects, as a real one does.
    cut_on: bytes of a request that, seen for the first time, brings it down with half that request sent."""

    def __init__(self, target_port: int, cut_on: bytes) -> None:
        self.port, self.target, self.cut_on = free_port(), target_port, cut_on
        self.cut = threading.Event()
        self.sockets: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def down(self) -> None:
        for sock in [self.listener, *self.sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.sockets = []

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                if from_client and self.cut_on in data and not self.cut.is_set():
                    self.cut.set()
                    dst.sendall(data[:len(data) // 2])
                    self.down()
                    return
                dst.sendall(data)
            except OSError:
                break
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FaultRelay:
    """An HTTP relay in front of the S3 server that passes every request on and can change an answer on its way
    back: faults[(method, key)] = fault(status, headers, body) -> (status, headers, body), applied once (or
    every time where keep=True). `seen` lists (method, key) of every request, keys without the bucket."""

    def __init__(self, target_port: int) -> None:
        import http.client
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        relay = self
        self.faults: dict[tuple[str, str], tuple] = {}
        self.seen: list[tuple[str, str]] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream = http.client.HTTPConnection("127.0.0.1", target_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                upstream.request(self.command, self.path, body=body, headers={**headers, "Host": f"127.0.0.1:{target_port}"})
                answer = upstream.getresponse()
                status, out_headers, out = answer.status, [(k, v) for k, v in answer.getheaders()], answer.read()
                upstream.close()
                path = unquote(self.path.split("?", 1)[0])
                key = path.split("/", 2)[-1] if path.count("/") >= 2 else ""
                relay.seen.append((self.command, key))
                fault = relay.faults.get((self.command, key))
                if fault:
                    change, keep = fault
                    if not keep:
                        del relay.faults[(self.command, key)]
                    status, out_headers, out = change(status, out_headers, out)
                self.send_response(status)
                for name, value in out_headers:
                    if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                        self.send_header(name, value)
                length = dict((k.lower(), v) for k, v in out_headers).get("content-length", "0")
                self.send_header("Content-Length", length if self.command == "HEAD" else str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, method: str, key: str, change, keep: bool = False) -> None:
        self.faults[(method, key)] = (change, keep)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def through_relay(monkeypatch, server: S3Server, relay: FaultRelay, mirrors: Path) -> None:
    """This process's clients reach the bucket through the relay, one attempt per request, mirroring into mirrors;
    the relay's faults and log cleared."""
    for name, value in {**server.env(), "AWS_ENDPOINT_URL": relay.endpoint, "AWS_MAX_ATTEMPTS": "1",
                        "AWS_RETRY_MODE": "standard", "QUANT_MIRROR_DIR": str(mirrors)}.items():
        monkeypatch.setenv(name, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()   # a client made for another test's settings is not reused
    relay.faults.clear()
    relay.seen.clear()


def s3_behind_relay():
    """A moto S3 server and a fault relay in front of it, for a module's tests (stopped after them)."""
    server = S3Server()
    relay = FaultRelay(server.port)
    try:
        yield server, relay
    finally:
        relay.stop()
        server.stop()


def cut_short(status: int, headers: list, body: bytes) -> tuple:
    """A 200 with half the body and no checksum header: nothing in the answer says it is short."""
    return status, [(k, v) for k, v in headers if not k.lower().startswith("x-amz-checksum")], body[:len(body) // 2]


def wait_for(predicate, timeout: float, every: float = 0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None
