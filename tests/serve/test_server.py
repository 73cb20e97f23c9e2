"""``basketgnn serve`` as users meet it: the real server (uvicorn in a subprocess on a loopback
port) called with a real HTTP client. Its answers equal `recommend`'s rows and `predict`'s
table; every bad request is a 4xx JSON error naming the field and the fix; a reload under load
loses no request and never mixes two models in one answer; a broken checkpoint keeps the old
model; SIGHUP reloads; overload is a 503; an internal error is a 500 with a request id."""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time

import httpx
import pandas as pd
import pytest

from basketgnn.io_utils import file_sha256
from basketgnn.workflow.serving import NextBaskets, Query
from tests.support.cli import make_checkpoint, run, run_ok
from tests.support.server import free_port, start_server

KEY = "test-admin-key"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two checkpoints over the same data (other fusion weights: other rankings), and the path
    the server serves (a copy of the first)."""
    a, data = make_checkpoint(tmp_path_factory.mktemp("a"), weight=0.3)
    b, _ = make_checkpoint(tmp_path_factory.mktemp("b"), weight=0.9)
    served = tmp_path_factory.mktemp("served") / "best.pt"
    shutil.copy(a, served)
    return a, b, served, data


@pytest.fixture(scope="module")
def server(checkpoints, tmp_path_factory):
    _, _, served, _ = checkpoints
    folder = tmp_path_factory.mktemp("server")
    (folder / "blocked.txt").write_text("")
    s = start_server("--checkpoint", str(served), "--blocked", str(folder / "blocked.txt"),
                     log=folder / "server.log", env={"BASKETGNN_ADMIN_KEY": KEY})  # fmt: skip
    s.blocked = folder / "blocked.txt"
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def items(answer):
    return [e["item_id"] for e in answer["items"]]


def test_health_ready_and_the_answer_format(client, checkpoints):
    _, _, served, data = checkpoints
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/ready").json()
    assert ready["ready"] and ready["checkpoint_sha256"] == file_sha256(served) and ready["customers"] == data.n_users
    r = client.get(f"/v1/customers/{data.user_ids[0]}/next-basket", params={"k": 3})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json" and r.headers["x-request-id"]
    answer = r.json()
    assert set(answer) == {"customer_id", "items", "model", "checkpoint_sha256", "warnings"}
    assert answer["model"] == "dnntsp" and answer["checkpoint_sha256"] == file_sha256(served)
    assert [e["rank"] for e in answer["items"]] == [1, 2, 3]
    for e in answer["items"]:
        kinds = [x["kind"] for x in e["reasons"]]
        assert kinds[:2] == ["score", "repeat"] and "neighbours" in kinds and all(x["text"] for x in e["reasons"])


def test_answers_equal_recommend_rows_and_predict(client, checkpoints, tmp_path, monkeypatch, capsys):
    _, _, served, data = checkpoints
    run_ok("recommend", "--checkpoint", str(served), "--out", str(tmp_path / "recs.csv"), "--k", "5")
    rows = pd.read_csv(tmp_path / "recs.csv", dtype={"customer_id": str, "item_id": str})
    customers = data.user_ids[:25].tolist()
    batch = client.post("/v1/next-baskets", json={"customers": [{"customer_id": c} for c in customers], "k": 5}).json()
    for c, in_batch in zip(customers, batch["answers"]):
        one = client.get(f"/v1/customers/{c}/next-basket", params={"k": 5, "reasons": "false"}).json()
        want = rows[rows.customer_id == c]
        assert items(one) == want.item_id.tolist() == items(in_batch)
        assert [e["score"] for e in one["items"]] == pytest.approx(want.score.tolist(), rel=1e-6)

    history = [[str(data.item_ids[i]) for i in b] for b in data.user_baskets(3)] + [["no-such-item"]]
    answer = client.post("/v1/next-basket", json={"history": history, "k": 4}).json()
    code, out, _ = run(monkeypatch, capsys, "predict", "--checkpoint", str(served), "--history", json.dumps(history), "--k", "4")
    assert code == 0
    table = [line.split("│")[1:4] for line in out.splitlines() if line.count("│") >= 4]
    assert items(answer) == [cells[1].strip() for cells in table]
    assert [round(e["score"], 4) for e in answer["items"]] == [float(cells[2]) for cells in table]
    assert answer["warnings"] == ["history: 1 item id(s) the model does not know were ignored: no-such-item"]


def test_new_baskets_exclusions_and_the_blocked_items_file(client, server, checkpoints):
    _, _, _, data = checkpoints
    c = str(data.user_ids[5])
    first = items(client.get(f"/v1/customers/{c}/next-basket", params={"k": 4, "reasons": "false"}).json())
    recent = client.post(f"/v1/customers/{c}/next-basket", json={"recent": [[first[0]]], "k": 4}).json()
    service = NextBaskets.load(server_checkpoint(client))
    assert items(recent) == items({"items": service.answer([Query(c, [[first[0]]], 4)], reasons=False)[0].items})
    got = client.get(f"/v1/customers/{c}/next-basket", params={"k": 4, "exclude": [first[0]]}).json()
    assert first[0] not in items(got) and items(got)[:3] == first[1:]
    server.blocked.write_text(f"{first[1]}\n")
    try:
        got = client.post("/v1/next-baskets", json={"customers": [{"customer_id": c}], "k": 4, "exclude": [first[0]]}).json()
        assert items(got["answers"][0])[:2] == first[2:] and client.get("/ready").json()["blocked_items"] == 1
    finally:
        server.blocked.write_text("")


def server_checkpoint(client):
    return client.get("/ready").json()["checkpoint"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code", "field"),
    [
        ("POST", "/v1/next-basket", b'{"history": [["a"]', 400, "bad_json", None),
        ("POST", "/v1/next-basket", {"history": [["a"]], "k": 0}, 422, "invalid_request", "k"),
        ("POST", "/v1/next-basket", {"history": [["a"]], "k": "ten"}, 422, "invalid_request", "k"),
        ("POST", "/v1/next-basket", {"history": [["a"]], "k": 2.5}, 422, "invalid_request", "k"),
        ("GET", "/v1/customers/{c}/next-basket?k=-1", None, 422, "invalid_request", "k"),
        ("GET", "/v1/customers/{c}/next-basket?k=x", None, 422, "invalid_request", "k"),
        ("POST", "/v1/next-basket", {"history": ["a", "b"]}, 422, "invalid_request", "history[0]"),
        ("POST", "/v1/next-basket", {"history": "a"}, 422, "invalid_request", "history"),
        ("POST", "/v1/next-basket", {"k": 3}, 422, "invalid_request", "history"),
        ("POST", "/v1/next-basket", {"history": [["a"]] * 1001}, 422, "invalid_request", "history"),
        ("POST", "/v1/next-basket", {"history": [["a"]], "kk": 1}, 422, "invalid_request", "kk"),
        ("POST", "/v1/next-basket", [["a"]], 422, "invalid_request", None),
        ("POST", "/v1/next-baskets", {"customers": [{"customer_id": "x"}] * 10_001}, 422, "invalid_request", "customers"),
        ("POST", "/v1/next-baskets", {"customers": []}, 422, "invalid_request", "customers"),
        ("POST", "/v1/next-baskets", {"customers": [{"customer_id": "{c}", "history": [["a"]]}]}, 422, "invalid_request", "customers[0]"),
        ("GET", "/v1/customers/nobody/next-basket", None, 404, "unknown_customer", "customer_id"),
        ("POST", "/v1/customers/nobody/next-basket", {"recent": []}, 404, "unknown_customer", "customer_id"),
        ("POST", "/v1/next-baskets", {"customers": [{"customer_id": "nobody"}]}, 404, "unknown_customer", "customer_id"),
        ("GET", "/v1/no-such-endpoint", None, 404, "http_error", None),
        ("POST", "/admin/reload", {}, 401, "unauthorized", None),
    ],
)
def test_bad_requests_get_a_json_error_naming_the_field_and_the_fix(client, checkpoints, method, path, body, status, code, field):
    c = str(checkpoints[3].user_ids[0])
    path = path.replace("{c}", c)
    if isinstance(body, bytes):
        r = client.request(method, path, content=body)
    elif body is not None:
        r = client.request(method, path, content=json.dumps(body).replace("{c}", c))
    else:
        r = client.request(method, path)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["field"] == field and error["message"]
    assert r.json()["request_id"] == r.headers["x-request-id"]
    if status in (400, 404, 422):
        assert error["fix"], error  # what to send instead


def test_reload_under_load_loses_nothing_and_never_mixes_models(client, server, checkpoints):
    a, b, served, data = checkpoints
    customers = data.user_ids[:30].tolist()
    expected = {}
    for path in (served, b):
        service = NextBaskets.load(path)
        answers = service.answer([Query(c, k=5) for c in customers], reasons=False)
        expected[file_sha256(path)] = {c: items({"items": x.items}) for c, x in zip(customers, answers)}
    assert expected[file_sha256(served)] != expected[file_sha256(b)]  # the swap is visible

    seen, failures, stop = [], [], threading.Event()

    def load(batch: bool) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            n = 0
            while not stop.is_set():
                n += 1
                if batch:
                    r = c.post("/v1/next-baskets", json={"customers": [{"customer_id": x} for x in customers], "k": 5})
                    answers = r.json().get("answers", []) if r.status_code == 200 else []
                else:
                    who = customers[n % len(customers)]
                    r = c.get(f"/v1/customers/{who}/next-basket", params={"k": 5, "reasons": "false"})
                    answers = [r.json()] if r.status_code == 200 else []
                if r.status_code != 200:
                    failures.append(r.text)
                shas = {x["checkpoint_sha256"] for x in answers}
                if len(shas) != 1 or any(items(x) != expected[x["checkpoint_sha256"]][x["customer_id"]] for x in answers):
                    failures.append(f"mixed or wrong answer: {shas}")
                seen.append(shas.pop() if shas else None)

    threads = [threading.Thread(target=load, args=(n % 3 == 0,)) for n in range(6)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        r = client.post("/admin/reload", json={"checkpoint": str(b)}, headers={"X-API-Key": KEY})
        assert r.status_code == 200, r.text
        assert r.json()["checkpoint_sha256"] == file_sha256(b) and r.json()["previous_sha256"] == file_sha256(served)
        time.sleep(1.5)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not failures, failures[:3]
    assert seen[0] == file_sha256(served) and seen[-1] == file_sha256(b)
    assert {file_sha256(served), file_sha256(b)} <= set(seen) and len(seen) > 20

    # A broken checkpoint: the answer says why, the model in service stays and keeps answering.
    broken = served.parent / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    r = client.post("/admin/reload", json={"checkpoint": str(broken)}, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "reload_failed"
    assert "still serving" in r.json()["error"]["message"] and str(b) in r.json()["error"]["message"]
    assert client.get("/ready").json()["checkpoint_sha256"] == file_sha256(b)
    assert client.get(f"/v1/customers/{customers[0]}/next-basket", params={"k": 5}).status_code == 200

    # SIGHUP reads the checkpoint in service again: a new file at its path is served.
    assert client.post("/admin/reload", json={"checkpoint": str(served)}, headers={"X-API-Key": KEY}).status_code == 200
    assert client.get("/ready").json()["checkpoint_sha256"] == file_sha256(a)
    shutil.copy(b, served)
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while client.get("/ready").json()["checkpoint_sha256"] != file_sha256(b) and time.monotonic() < deadline:
        time.sleep(0.2)
    ready = client.get("/ready").json()
    assert ready["checkpoint"] == str(served) and ready["checkpoint_sha256"] == file_sha256(b)
    shutil.copy(a, served)


def test_overload_is_a_503_and_the_server_lives_on(checkpoints, tmp_path):
    _, _, served, data = checkpoints
    s = start_server("--checkpoint", str(served), "--max-pending", "1", log=tmp_path / "log.txt")
    try:
        c = str(data.user_ids[0])
        r = httpx.post(f"{s.url}/v1/next-baskets", json={"customers": [{"customer_id": c}, {"customer_id": c}]})
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "overloaded"
        assert httpx.get(f"{s.url}/v1/customers/{c}/next-basket").status_code == 200
        r = httpx.post(f"{s.url}/admin/reload", json={})
        assert r.status_code == 403 and "BASKETGNN_ADMIN_KEY" in r.json()["error"]["message"]
    finally:
        s.stop()
    assert "Traceback" not in s.log_text()


def test_an_internal_error_is_a_500_with_a_request_id_in_the_log(checkpoints, monkeypatch, caplog):
    import uvicorn

    from basketgnn.serve.app import create_app
    from basketgnn.serve.settings import ServeSettings
    from basketgnn.workflow import serving

    _, _, served, data = checkpoints
    app = create_app(ServeSettings(str(served)), load_now=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)

        def broken(self, queries, reasons=True):
            raise RuntimeError("a bug")

        monkeypatch.setattr(serving.NextBaskets, "answer", broken)
        r = httpx.get(f"http://127.0.0.1:{port}/v1/customers/{data.user_ids[0]}/next-basket")
        assert r.status_code == 500
        rid = r.json()["request_id"]
        assert r.json()["error"]["code"] == "internal" and rid in r.json()["error"]["message"]
        assert any(rid in rec.getMessage() and rec.exc_info for rec in caplog.records)
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200  # still up
    finally:
        server.should_exit = True
        thread.join(20)


def status_kb(pid: int) -> int:
    """VmRSS of a process (kB)."""
    line = next(x for x in open(f"/proc/{pid}/status") if x.startswith("VmRSS:"))
    return int(line.split()[1])


def test_a_checkpoint_that_does_not_load_stops_several_workers_before_they_start(tmp_path, monkeypatch, capsys):
    broken = tmp_path / "best.pt"
    broken.write_bytes(b"not a checkpoint")
    code, _, err = run(monkeypatch, capsys, "serve", "--checkpoint", str(broken), "--workers", "2", "--port", str(free_port()))
    assert code == 2 and "not a basketgnn checkpoint" in err and "Traceback" not in err


def test_several_workers_are_replaced_one_by_one_on_sighup(checkpoints, tmp_path):
    """--workers 2: SIGHUP to the parent brings each new worker into service before retiring
    the old one (no failed request); a checkpoint that does not load keeps the old workers."""
    a, b, _, data = checkpoints
    served = tmp_path / "best.pt"
    shutil.copy(a, served)
    s = start_server("--checkpoint", str(served), "--data", str(a.parent / "data"), "--workers", "2",
                     log=tmp_path / "log.txt", env={"BASKETGNN_ADMIN_KEY": KEY})  # fmt: skip
    url = f"{s.url}/v1/customers/{data.user_ids[0]}/next-basket"
    try:
        r = httpx.post(f"{s.url}/admin/reload", json={}, headers={"X-API-Key": KEY})
        assert r.status_code == 409 and "SIGHUP" in r.json()["error"]["fix"]
        parent = status_kb(s.proc.pid)
        assert parent < 250_000, f"the supervising process holds {parent} kB: it should not load the model"
        shutil.copy(b, served)
        s.proc.send_signal(signal.SIGHUP)
        statuses = []
        deadline = time.monotonic() + 90
        # Done when both new workers are up and both old ones have finished (uvicorn's log).
        while time.monotonic() < deadline and not (
            s.log.read_text().count("Application startup complete") >= 4
            and s.log.read_text().count("Finished server process") >= 2
        ):
            statuses.append(httpx.get(url, params={"reasons": "false"}, timeout=60).status_code)
            time.sleep(0.05)
        assert set(statuses) == {200} and len(statuses) > 5
        assert {httpx.get(f"{s.url}/ready").json()["checkpoint_sha256"] for _ in range(8)} == {file_sha256(b)}

        served.write_bytes(b"not a checkpoint")
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while "aborting the restart" not in s.log.read_text() and time.monotonic() < deadline:
            assert httpx.get(url, params={"reasons": "false"}, timeout=60).status_code == 200
            time.sleep(0.2)
        assert "not a basketgnn checkpoint" in s.log.read_text()
        assert {httpx.get(f"{s.url}/ready").json()["checkpoint_sha256"] for _ in range(8)} == {file_sha256(b)}
    finally:
        s.stop()
