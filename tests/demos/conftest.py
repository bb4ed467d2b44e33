"""A real HTTP server on this machine (a thread) standing for the internet the demos download from."""
from __future__ import annotations

import functools
import http.server
import threading

import pytest


class _Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output stays the test's
        pass


@pytest.fixture
def server(tmp_path):
    """``(folder, base URL)``: the files put in the folder are served under the URL."""
    served = tmp_path / "served"
    served.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Files, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    thread.join()
