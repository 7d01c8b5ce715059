"""``duro dev`` as a real process, driven over HTTP: starts, quotas (429), the limits verbs,
overrides surviving a restart, hot reload, a broken import, and the security rules."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from duro_devserver.client import DuroClient
from tests.support.devserver import DevServer, running_dev_server, stop
from tests.support.waiting import wait_until


def run_of(client: httpx.Client, run_id: str) -> dict:
    return client.get(f"/api/runs/{run_id}").json()


def wait_status(client: httpx.Client, run_id: str, status: str) -> dict:
    return wait_until(
        lambda: (d := run_of(client, run_id))["run"]["status"] == status and d,
        15,
        f"run {run_id} to be {status}",
    )


def start(client: httpx.Client, workflow: str, inp: object, **extra: object) -> httpx.Response:
    return client.post(f"/api/workflows/{workflow}/runs", json={"input": inp, **extra})


def test_start_a_run_and_read_it_back(dev_server: DevServer):
    with dev_server.client() as client:
        workflows = client.get("/api/workflows").json()["workflows"]
        greet = next(w for w in workflows if w["name"] == "greet")
        assert greet["input_schema"]["required"] == ["name"]
        answer = start(client, "greet", {"name": "ada", "times": 2})
        assert answer.status_code == 201 and answer.json()["created"] is True
        run_id = answer.json()["run"]["id"]
        detail = wait_status(client, run_id, "completed")
        assert detail["run"]["output"] == "hello ada hello ada"
        assert [(s["name"], s["status"]) for s in detail["steps"]] == [("shout", "completed")]
        again = start(client, "greet", {"name": "ada"}, run_id=run_id)
        assert again.status_code == 200 and again.json()["created"] is False
        page = client.get("/api/runs", params={"workflow": "greet", "status": "completed"}).json()
        assert [r["id"] for r in page["runs"]] == [run_id] and page["next_cursor"] is None


def test_bad_input_is_a_clear_4xx_and_creates_nothing(dev_server: DevServer):
    with dev_server.client() as client:
        wrong = start(client, "greet", {"times": 2})
        assert wrong.status_code == 422 and "name" in wrong.json()["message"]
        assert client.post("/api/workflows/nope/runs", json={}).status_code == 404
        broken = client.post(
            "/api/workflows/greet/runs", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert broken.status_code == 400 and broken.json()["error"] == "bad_request"
        assert client.get("/api/runs").json()["runs"] == []


def test_a_quota_refuses_with_429_and_the_quota_fields(dev_server: DevServer):
    with dev_server.client() as client:
        for job in ("1", "2"):
            assert start(client, "hold", {"tenant": "acme", "job": job}).status_code == 201
        refused = start(client, "hold", {"tenant": "acme", "job": "3"})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        body = refused.json()
        assert (body["error"], body["workflow"], body["key"], body["limit"], body["active"]) == (
            "concurrency_limit",
            "hold",
            "acme",
            2,
            2,
        )
        assert start(client, "hold", {"tenant": "globex", "job": "4"}).status_code == 201
        per_start = start(client, "greet", {"name": "x"}, concurrency={"key": "k", "limit": 0})
        assert per_start.status_code == 429 and per_start.json()["key"] == "k"


def test_the_limits_verbs_and_overrides_that_survive_a_restart(e2e_project: Path):
    with running_dev_server(e2e_project) as server, server.client() as client:
        first = start(client, "hold", {"tenant": "a", "job": "1"}).json()["run"]["id"]
        second = start(client, "hold", {"tenant": "b", "job": "2"}).json()["run"]["id"]
        slots = wait_until(
            lambda: len(s := client.get("/api/limits/partner-api/slots").json()["slots"]) == 2 and s,
            15,
            "a busy slot and a waiter",
        )
        assert [(s["state"], s["run_id"], s["label"], s["position"]) for s in slots] == [
            ("busy", first, "job 1", None),
            ("waiting", second, "job 2", 1),
        ]
        hook = run_of(client, second)["steps"][0]
        assert (hook["kind"], hook["name"], hook["status"]) == (
            "hook",
            "Esperando hueco · partner-api",
            "waiting",
        )

        released = client.post(f"/api/slots/{slots[0]['id']}/release")
        assert released.json() == {"released": True, "slot_id": slots[0]["id"]}
        wait_until(
            lambda: client.get("/api/limits/partner-api/slots").json()["slots"][0]["run_id"] == second,
            15,
            "the waiter to get the slot",
        )
        assert client.post(f"/api/slots/{slots[0]['id']}/release").json()["released"] is False
        assert client.post("/api/slots/no-such-slot/release").status_code == 404

        capacity = client.put("/api/limits/partner-api/capacity", json={"capacity": 3}).json()["limit"]
        assert (capacity["capacity"], capacity["effective_capacity"], capacity["capacity_override"]) == (
            1,
            3,
            3,
        )
        hold = client.put("/api/limits/partner-api/max-hold", json={"max_hold": "2h"}).json()["limit"]
        assert (hold["max_hold"], hold["effective_max_hold"], hold["max_hold_override"]) == ("1h", "2h", "2h")
        for bad in ({"capacity": 0}, {"capacity": 100_001}, {"capacity": "lots"}):
            assert client.put("/api/limits/partner-api/capacity", json=bad).status_code == 422
        for bad in ({"max_hold": "31d"}, {"max_hold": "soon"}):
            assert client.put("/api/limits/partner-api/max-hold", json=bad).status_code == 422
        assert client.put("/api/limits/nope/capacity", json={"capacity": 2}).status_code == 404
        assert client.get("/api/limits/partner-api").json()["limit"]["effective_capacity"] == 3

    with running_dev_server(e2e_project) as server, server.client() as client:
        limit = client.get("/api/limits/partner-api").json()["limit"]
        assert (limit["capacity_override"], limit["max_hold_override"]) == (3, "2h")
        assert run_of(client, second)["run"]["status"] == "suspended"  # still waiting for "done"
        assert client.post(f"/api/runs/{second}/signals/done", json=None).status_code == 202
        assert wait_status(client, second, "completed")["run"]["output"] == "job 2 done"
        reset = client.put("/api/limits/partner-api/capacity", json={"capacity": None}).json()["limit"]
        assert (reset["effective_capacity"], reset["capacity_override"]) == (1, None)
        assert (
            client.put("/api/limits/partner-api/max-hold", json={"max_hold": None}).json()["limit"][
                "max_hold_override"
            ]
            is None
        )


def test_a_saved_change_is_live_at_once_and_running_runs_survive_the_reload(dev_server: DevServer):
    source = dev_server.project / "workflows" / "jobs.py"
    with dev_server.client() as client:
        waiting = start(client, "hold", {"tenant": "a", "job": "1"}).json()["run"]["id"]
        wait_status(client, waiting, "suspended")
        reloads = client.get("/api/status").json()["reloads"]
        source.write_text(source.read_text().replace('f"hello {name}"', 'f"howdy {name}"'))
        wait_until(lambda: client.get("/api/status").json()["reloads"] > reloads, 10, "the reload")
        greeted = start(client, "greet", {"name": "bo"}).json()["run"]["id"]
        assert wait_status(client, greeted, "completed")["run"]["output"] == "howdy bo"
        client.post(f"/api/runs/{waiting}/signals/done")
        assert wait_status(client, waiting, "completed")["run"]["output"] == "job 1 done"


def test_a_reload_changes_no_runs_record(dev_server: DevServer):
    """Handing runs back and taking them up again is bookkeeping: after a reload a holding run, a
    queued one and their steps read exactly as before, ``updated_at`` included."""
    source = dev_server.project / "workflows" / "jobs.py"
    with dev_server.client() as client:
        holding = start(client, "hold", {"tenant": "a", "job": "1"}).json()["run"]["id"]
        queued = start(client, "hold", {"tenant": "b", "job": "2"}).json()["run"]["id"]
        wait_until(
            lambda: (
                [s["state"] for s in client.get("/api/limits/partner-api/slots").json()["slots"]]
                == ["busy", "waiting"]
            ),
            15,
            "one slot busy and one run in the queue",
        )
        wait_status(client, holding, "suspended")
        before = {run_id: run_of(client, run_id) for run_id in (holding, queued)}
        for _ in range(2):  # the second reload stops the engine that recovered the runs in the first
            reloads = client.get("/api/status").json()["reloads"]
            source.write_text(source.read_text() + "\n# touched\n")
            wait_until(lambda: client.get("/api/status").json()["reloads"] > reloads, 10, "the reload")  # noqa: B023
            # a run started after the reload has completed: the worker took up the runs before it
            greeted = start(client, "greet", {"name": "after"}).json()["run"]["id"]
            wait_status(client, greeted, "completed")
            assert {run_id: run_of(client, run_id) for run_id in (holding, queued)} == before
        client.post(f"/api/runs/{holding}/signals/done")  # they were taken up: they go on
        assert wait_status(client, holding, "completed")["run"]["output"] == "job 1 done"
        client.post(f"/api/runs/{queued}/signals/done")
        assert wait_status(client, queued, "completed")["run"]["output"] == "job 2 done"


def test_a_project_that_never_loaded_waits_for_a_fix(e2e_project: Path):
    broken = e2e_project / "workflows" / "broken.py"
    broken.write_text("raise RuntimeError('not yet')\n")
    with running_dev_server(e2e_project) as server, server.client() as client:
        assert "RuntimeError: not yet" in client.get("/api/status").json()["load_error"]["message"]
        log = server.log()
        assert "no version of it has loaded yet: the server waits for a fix" in log
        assert "last good version" not in log
        assert client.get("/api/workflows").status_code == 503
        broken.unlink()
        wait_until(lambda: client.get("/api/status").json()["load_error"] is None, 10, "the fixed reload")
        broken.write_text("raise RuntimeError('again')\n")
        wait_until(lambda: "RuntimeError: again" in server.log(), 10, "the second load error")
        assert "the server keeps running the last good version" in server.log()


def test_a_workflow_that_fails_to_import_is_reported_and_the_server_keeps_going(dev_server: DevServer):
    broken = dev_server.project / "workflows" / "broken.py"
    with dev_server.client() as client:
        broken.write_text("from duro import workflow\n\n@workflow\nasync def oops(:\n")
        error = wait_until(lambda: client.get("/api/status").json()["load_error"], 10, "the load error")
        assert "SyntaxError" in error["message"] and "broken.py" in error["traceback"]
        assert "SyntaxError" in dev_server.log()
        assert start(client, "greet", {"name": "still"}).status_code == 201  # the last good code runs on
        broken.unlink()
        wait_until(lambda: client.get("/api/status").json()["load_error"] is None, 10, "the fixed reload")


def test_state_changing_requests_from_another_site_are_refused(dev_server: DevServer):
    with dev_server.client() as client:
        evil = client.post(
            "/api/workflows/greet/runs",
            json={"input": {"name": "x"}},
            headers={"origin": "https://evil.example"},
        )
        assert evil.status_code == 403 and evil.json()["error"] == "forbidden"
        sneaky = client.put(
            "/api/limits/partner-api/capacity", json={"capacity": 5}, headers={"sec-fetch-site": "cross-site"}
        )
        assert sneaky.status_code == 403
        own = client.post(
            "/api/workflows/greet/runs", json={"input": {"name": "x"}}, headers={"origin": dev_server.url}
        )
        assert own.status_code == 201
        assert client.get("/api/runs").json()["runs"][0]["id"] == own.json()["run"]["id"]
        big = client.post(
            "/api/workflows/greet/runs",
            content=b" " * (1024 * 1024 + 1),
            headers={"content-type": "application/json"},
        )
        assert big.status_code == 413


def test_binding_beyond_loopback_needs_a_token_and_then_every_call_does(e2e_project: Path):
    with running_dev_server(e2e_project, args=("--token", "s3cret"), host="0.0.0.0") as server:
        with server.client() as client:
            assert client.get("/api/limits").status_code == 401
            assert client.get("/api/limits", headers={"authorization": "Bearer wrong"}).status_code == 401
            ok = client.get("/api/limits", headers={"authorization": "Bearer s3cret"})
            assert ok.status_code == 200
            login = client.get("/", params={"token": "s3cret"}, follow_redirects=False)
            assert login.status_code == 303 and "duro_token" in login.headers["set-cookie"]
            assert client.get("/api/limits", headers={"cookie": "duro_token=s3cret"}).status_code == 200
        assert "s3cret" not in server.log()
        info = json.loads((e2e_project / ".duro" / "server.json").read_text())
        assert info["token_required"] is True and "s3cret" not in json.dumps(info)


def test_without_a_token_a_public_address_is_refused(e2e_project: Path):
    process = subprocess.run(
        [sys.executable, "-m", "duro_devserver", "dev", str(e2e_project), "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in os.environ.items() if k != "DURO_TOKEN"},
    )
    assert process.returncode == 2 and "without a token" in process.stderr


def test_requests_for_another_host_are_refused_reads_included(e2e_project: Path):
    """DNS rebinding: a page on rebind.evil.example that resolves to 127.0.0.1 is same-origin to the
    browser; only its Host gives it away."""
    with (
        running_dev_server(e2e_project, args=("--allow-host", "duro.test")) as server,
        server.client() as client,
    ):
        port = urlsplit(server.url).port
        evil = f"rebind.evil.example:{port}"
        as_evil = {"host": evil, "origin": f"http://{evil}"}
        refused = [
            client.post("/api/workflows/greet/runs", json={"input": {"name": "x"}}, headers=as_evil),
            client.put("/api/limits/partner-api/capacity", json={"capacity": 5}, headers=as_evil),
            client.get("/api/runs", headers=as_evil),
            client.get("/", headers=as_evil),
            client.get("/api/health", headers={"host": f"127.attacker.example:{port}"}),
        ]
        for answer in refused:
            assert answer.status_code == 400 and answer.json()["error"] == "bad_request"
        message = refused[0].json()["message"]
        assert "rebind.evil.example" in message and "--allow-host rebind.evil.example" in message
        assert client.get("/api/runs").json()["runs"] == []
        assert client.get("/api/limits/partner-api").json()["limit"]["capacity_override"] is None
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            "localhost",
            f"duro.test:{port}",
            f"DURO.TEST:{port}",
        ):
            assert client.get("/api/runs", headers={"host": host}).status_code == 200, host
        allowed = f"duro.test:{port}"
        created = client.post(
            "/api/workflows/greet/runs",
            json={"input": {"name": "x"}},
            headers={"host": allowed, "origin": f"http://{allowed}"},
        )
        assert created.status_code == 201
    with (
        running_dev_server(e2e_project, command="serve", args=("--allow-host", "duro.test")) as server,
        server.client() as client,
    ):
        port = urlsplit(server.url).port
        assert client.get("/api/runs", headers={"host": f"duro.test:{port}"}).status_code == 200
        assert client.get("/api/runs", headers={"host": f"other.test:{port}"}).status_code == 400


def test_only_real_loopback_addresses_count_as_loopback(e2e_project: Path):
    for host in ("127.attacker.example", "127.0.0.1.nip.io"):
        process = subprocess.run(
            [sys.executable, "-m", "duro_devserver", "dev", str(e2e_project), "--host", host, "--port", "0"],
            capture_output=True,
            text=True,
            timeout=30,
            env={k: v for k, v in os.environ.items() if k != "DURO_TOKEN"},
        )
        assert process.returncode == 2 and "without a token" in process.stderr, host


def test_no_page_may_frame_studio_or_the_api(dev_server: DevServer):
    with dev_server.client() as client:
        answers = [
            client.get("/"),
            client.get("/studio/app.js"),
            client.get("/api/runs"),
            client.get("/api/nope"),
            client.get("/api/runs", headers={"host": "evil.example"}),
        ]
        for answer in answers:
            assert answer.headers["x-frame-options"] == "DENY", answer.url
            assert answer.headers["content-security-policy"] == "frame-ancestors 'none'", answer.url
        assert [a.status_code for a in answers] == [200, 200, 200, 404, 400]


def test_non_ascii_tokens_are_a_401_and_a_non_ascii_token_works(e2e_project: Path):
    token = "pässwörd-κλειδί"
    with running_dev_server(e2e_project, env={"DURO_TOKEN": token}) as server, server.client() as client:
        for wrong in (
            {"authorization": "Bearer ñope".encode()},
            {"authorization": b"Bearer \xff\xfe"},
            {"cookie": "duro_token=ñope".encode()},
            {"authorization": "Bearer nope"},
            {},
        ):
            answer = client.get("/api/limits", headers=wrong)
            assert answer.status_code == 401 and "token" in answer.json()["message"], wrong
        assert client.get("/", params={"token": "ñope"}, follow_redirects=False).status_code == 401
        assert (
            client.get("/api/limits", headers={"authorization": f"Bearer {token}".encode()}).status_code
            == 200
        )
        login = client.get("/", params={"token": token}, follow_redirects=False)
        assert login.status_code == 303
        cookie = login.headers["set-cookie"].split(";")[0]
        assert cookie.isascii() and client.get("/api/limits", headers={"cookie": cookie}).status_code == 200
        with DuroClient(server.url, token=token) as duro:  # the CLI's client sends it as UTF-8 too
            assert "limits" in duro.limits()
    assert token not in server.log()


def _raw_request(url: str, head: str, body_chunks: list[bytes]) -> str:
    """Send ``head`` and then ``body_chunks`` on a socket of its own, and return the answer's status
    line and headers: the server must answer without the rest of the body."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as connection:
        connection.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        for chunk in body_chunks:
            connection.sendall(chunk)
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = connection.recv(65536)
            if not data:
                break
            answer += data
    return answer.decode("latin-1")


def test_a_body_over_the_limit_is_refused_as_it_arrives(dev_server: DevServer):
    host = urlsplit(dev_server.url).netloc
    piece = b"[" * 64 * 1024
    chunked = [b"%x\r\n%s\r\n" % (len(piece), piece)] * 17  # 1 MiB + 64 KiB, and the final chunk never sent
    answer = _raw_request(
        dev_server.url,
        f"POST /api/workflows/greet/runs HTTP/1.1\nHost: {host}\n"
        f"Content-Type: application/json\nTransfer-Encoding: chunked\n",
        chunked,
    )
    assert answer.startswith("HTTP/1.1 413"), answer
    announced = _raw_request(
        dev_server.url,
        f"POST /api/runs/x/signals/done HTTP/1.1\nHost: {host}\n"
        f"Content-Type: application/json\nContent-Length: 10000000000\n",
        [],
    )
    assert announced.startswith("HTTP/1.1 413"), announced
    with dev_server.client() as client:
        assert client.get("/api/runs").json()["runs"] == []


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_json_nested_too_deep_is_a_400_that_names_the_limit(dev_server: DevServer):
    with dev_server.client() as client:
        waiting = start(client, "hold", {"tenant": "a", "job": "1", "deep": json.loads(_nested(98))})
        assert waiting.status_code == 201  # {"input": {"deep": [...]}}: 100 deep, the maximum
        run_id = waiting.json()["run"]["id"]
        assert run_of(client, run_id)["run"]["input"]["deep"] == json.loads(_nested(98))
        json_body = {"content-type": "application/json"}
        for depth in (2_000, 100_000):
            too_deep = client.post(
                "/api/workflows/hold/runs", content=f'{{"input": {_nested(depth)}}}', headers=json_body
            )
            assert too_deep.status_code == 400 and "100 deep" in too_deep.json()["message"]
            signal = client.post(
                f"/api/runs/{run_id}/signals/done", content=_nested(depth), headers=json_body
            )
            assert signal.status_code == 400 and "100 deep" in signal.json()["message"]
        over = client.post(f"/api/runs/{run_id}/signals/done", content=_nested(101), headers=json_body)
        assert over.status_code == 400
        assert [r["id"] for r in client.get("/api/runs").json()["runs"]] == [run_id]
        assert run_of(client, run_id)["run"]["status"] != "completed"  # no signal got through
        at_the_limit = client.post(
            f"/api/runs/{run_id}/signals/done", content=_nested(100), headers=json_body
        )
        assert at_the_limit.status_code == 202


def test_sigterm_stops_gracefully_and_removes_the_server_file(e2e_project: Path):
    with running_dev_server(e2e_project) as server:
        stop(server.process)  # uvicorn re-raises the signal once shut down: the exit status says SIGTERM
        assert "Application shutdown complete" in server.log()
        assert not (e2e_project / ".duro" / "server.json").exists()
