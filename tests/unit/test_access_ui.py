"""Access control of the HTTP API (API key, loopback rule) and what `ragexp ui` does per URI."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from ragexp.cli import main as cli
from ragexp.cli.ui import plan
from ragexp.serving.access import MIN_KEY_CHARS, AccessError, api_key_for, authorized, is_loopback
from ragexp.serving.api import create_app

KEY = "s3cr3t-Key-value-0123456789"


@pytest.mark.parametrize("host,loop", [("127.0.0.1", True), ("127.8.9.1", True), ("::1", True),
                                       ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                       ("::", False), ("192.168.1.4", False),
                                       ("example.org", False)])
def test_loopback_addresses(host, loop):
    assert is_loopback(host) is loop


def test_non_loopback_needs_a_key_or_insecure():
    assert api_key_for("127.0.0.1", None, False, {}) is None
    with pytest.raises(AccessError, match="--api-key-env VAR.*--insecure"):
        api_key_for("0.0.0.0", None, False, {})
    assert api_key_for("0.0.0.0", None, True, {}) is None
    assert api_key_for("0.0.0.0", "RAGEXP_KEY", False, {"RAGEXP_KEY": KEY}) == KEY
    assert api_key_for("127.0.0.1", "RAGEXP_KEY", False, {"RAGEXP_KEY": KEY}) == KEY
    for env in ({}, {"RAGEXP_KEY": "  "}):
        with pytest.raises(AccessError, match="RAGEXP_KEY.*unset or empty"):
            api_key_for("0.0.0.0", "RAGEXP_KEY", False, env)


@pytest.mark.parametrize("key", ["k", "0123456789abcde", " 0123456789abcde\n"])
def test_keys_shorter_than_the_minimum_are_refused_naming_the_setting(key):
    assert MIN_KEY_CHARS == 16  # the minimum docs/serving.md states
    with pytest.raises(AccessError) as err:
        api_key_for("0.0.0.0", "RAGEXP_KEY", False, {"RAGEXP_KEY": key})
    message = str(err.value)
    assert message.startswith(f"--api-key-env RAGEXP_KEY: the key is {len(key.strip())} "
                              f"characters; keys need at least 16")
    assert "\n" not in message and (len(key.strip()) < 4 or key.strip() not in message)


def test_a_key_of_the_minimum_length_is_taken_stripped():
    key = "0123456789abcdef"
    assert api_key_for("0.0.0.0", "RAGEXP_KEY", False, {"RAGEXP_KEY": f"  {key}\n"}) == key
    http = TestClient(create_app(fake_engine(), api_key=key))
    assert http.get("/health", headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_key_comparison_uses_hmac_compare_digest(monkeypatch):
    import hmac

    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    assert authorized(KEY, f"Bearer {KEY}") and authorized(KEY, f"bearer {KEY}")
    assert not authorized(KEY, KEY)  # no scheme
    assert not authorized(KEY, f"Bearer {KEY[:-1]}") and not authorized(KEY, None)
    assert not authorized(KEY, f"Basic {KEY}")
    assert len(calls) == 6


def fake_engine():
    return SimpleNamespace(run_id="r" * 32, threshold=0.5, cfg={"traces": {"enabled": False}},
                           resources=SimpleNamespace(chunks=[1, 2, 3]))


def test_requests_without_the_key_get_401_and_never_see_it(caplog):
    caplog.set_level(logging.DEBUG)
    http = TestClient(create_app(fake_engine(), api_key=KEY))
    bad = [http.get("/health"), http.get("/health", headers={"Authorization": "Bearer nope"}),
           http.get("/search", params={"q": "x"}), http.post("/answer", json={"question": "x"}),
           http.get("/openapi.json"), http.get("/docs"),
           http.get("/health", headers={"Authorization": KEY})]
    for r in bad:
        assert r.status_code == 401, r.url
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert KEY not in r.text and KEY not in str(r.headers)
        assert "r" * 32 not in r.text + str(r.headers)  # nor the run served
    assert "Authorization: Bearer" in bad[0].json()["error"]
    ok = http.get("/health", headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and ok.json()["chunks"] == 3
    assert KEY not in caplog.text


def test_without_a_key_the_api_is_open():
    assert TestClient(create_app(fake_engine())).get("/health").status_code == 200


def test_cli_serve_refuses_open_non_loopback_before_building_anything(monkeypatch, capsys):
    def boom(args):
        raise AssertionError("the engine must not be built")

    monkeypatch.setattr(cli, "_engine", boom)
    monkeypatch.setenv("RAGEXP_TEST_KEY", KEY)
    assert cli.main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--api-key-env" in err and "--insecure" in err
    assert cli.main(["serve", "--host", "0.0.0.0", "--api-key-env", "RAGEXP_NO_SUCH_VAR"]) == 2
    assert "RAGEXP_NO_SUCH_VAR" in capsys.readouterr().err
    monkeypatch.setenv("RAGEXP_SHORT_KEY", "k")
    assert cli.main(["serve", "--api-key-env", "RAGEXP_SHORT_KEY"]) == 2  # on loopback too
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--api-key-env RAGEXP_SHORT_KEY" in err
    assert "at least 16" in err and "Traceback" not in err
    started = {}
    import uvicorn

    monkeypatch.setattr(cli, "_engine", lambda args, pyfunc=False: fake_engine())
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    assert cli.main(["serve", "--host", "0.0.0.0", "--api-key-env", "RAGEXP_TEST_KEY"]) == 0
    assert started["host"] == "0.0.0.0"
    http = TestClient(started["app"])
    assert http.get("/health").status_code == 401
    assert http.get("/health", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert cli.main(["serve", "--host", "0.0.0.0", "--insecure"]) == 0
    assert "without access control" in capsys.readouterr().err
    assert TestClient(started["app"]).get("/health").status_code == 200
    assert KEY not in capsys.readouterr().out + capsys.readouterr().err


def test_ui_prints_a_server_url_and_serves_local_stores():
    p = plan("http://mlflow.internal:5000/")
    assert p.url == "http://mlflow.internal:5000" and not p.command
    assert plan("https://example.org/mlflow").url == "https://example.org/mlflow"
    assert not plan("databricks").command and "Databricks" in plan("databricks").note
    for uri in ("sqlite:////tmp/x/mlflow.db", "file:///tmp/mlruns", "/tmp/mlruns",
                "postgresql://u@db/mlflow"):
        p = plan(uri, "127.0.0.1", 5123)
        assert p.url == "http://127.0.0.1:5123"
        assert p.command[:4] == (sys.executable, "-m", "mlflow", "ui")
        assert p.command[p.command.index("--backend-store-uri") + 1] == uri


@pytest.mark.slow
def test_cli_ui_with_a_server_uri_starts_nothing(monkeypatch, capsys):
    import subprocess

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("started mlflow ui"))
    assert cli.main(["ui"]) == 0
    assert "http://127.0.0.1:5999" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_stopping_ragexp_ui_stops_the_servers_workers_too(tmp_path, sig):
    """A trial: SIGTERM (or SIGINT to its pid alone) ended ``ragexp ui`` but left ``mlflow
    ui``'s server and worker processes running, reparented to init, the port still served.
    The UI runs in a process group of its own, which ``ragexp ui`` stops on its way out: here a
    stand-in server that starts a worker, as ``mlflow ui`` does, is gone with it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pids = tmp_path / "pids"
    server = ("import subprocess, sys, os, time; "
              "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{w.pid}}'); time.sleep(60)")
    script = ("import signal, sys\n"  # Ctrl-C as a terminal delivers it, even when the suite
              # runs in the background (where a shell starts children with SIGINT ignored)
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "from ragexp.cli import ui\n"
              f"ui.plan = lambda *a: ui.Plan('http://x', (sys.executable, '-c', {server!r}))\n"
              "sys.exit(ui.ui())\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (pids.exists() and len(pids.read_text().split()) == 2):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    started = [int(p) for p in pids.read_text().split()]
    proc.send_signal(getattr(signal, sig))
    assert proc.wait(30) == 0

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as fh:  # a zombie awaiting its reaper is gone too
            return fh.read().split(") ")[1].split()[0] != "Z"

    deadline = time.monotonic() + 15
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in started)
