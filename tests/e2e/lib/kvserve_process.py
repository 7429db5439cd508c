"""`kvserve serve` for Python tests and benchmarks: start it on a free loopback port and wait
until /ready answers 200. Used by tests/e2e/refmodels_test.py, tests/e2e/kv_events_test.py and
bench/scale_out.py."""
import os
import re
import subprocess
import time
import urllib.request


def start(kvserve, args, work, timeout=120):
    """(process, base URL). `args` follow `serve`; stdout/stderr go to files in `work` (the
    error's tail is raised if the process exits first)."""
    out = open(os.path.join(work, "serve.out"), "w+")
    err = open(os.path.join(work, "serve.err"), "w+")
    proc = subprocess.Popen([kvserve, "serve", "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "-1", *args],
                            stdout=out, stderr=err)
    deadline = time.time() + timeout
    while time.time() < deadline:
        out.seek(0)
        m = re.search(r"HTTP on (http://127\.0\.0\.1:\d+)", out.read())
        if m:
            try:
                with urllib.request.urlopen(m.group(1) + "/ready", timeout=5) as r:
                    if r.status == 200:
                        return proc, m.group(1)
            except OSError:
                pass
        if proc.poll() is not None:
            err.seek(0)
            raise RuntimeError("kvserve exited: " + err.read()[-2000:])
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("kvserve did not become ready")
