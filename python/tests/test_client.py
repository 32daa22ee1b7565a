"""`Index.search_batch` and `cellar.Client` against a real `cellar serve` on loopback."""

from __future__ import annotations

import base64
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from servers import cellar_binary, serving
from test_embeddings import DIM, by_vector, documents

import cellar

ROOT = Path(__file__).resolve().parents[2]


KEY = "s3cret-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[cellar.Index, str]]:
    """One `cellar serve` for the module, behind an API key: an index of 60 documents (`--index`),
    a data directory (`--data-dir`) and streams (`--streams`); no model (vectors only)."""
    ids, vectors, texts = documents(60, seed=5)
    root = tmp_path_factory.mktemp("served")
    index = cellar.Index.from_embeddings(root / "idx", ids, vectors, texts=texts)
    (root / "key").write_text(KEY + "\n")
    command = [str(cellar_binary()), "serve", "--index", str(root / "idx"), "--data-dir", str(root / "data")]
    command += ["--streams", str(root / "streams"), "--api-key-file", str(root / "key"), "--lazy-encoder"]
    command += ["--bind", "127.0.0.1:0", "--workers", "1"]
    with serving(command, root / "serve.log") as url:
        yield index, url


@pytest.fixture(scope="module")
def served(server: tuple[cellar.Index, str]) -> tuple[cellar.Index, cellar.Client]:
    index, url = server
    return index, cellar.Client(url, api_key=KEY)


def query(i: int) -> dict:
    rng = np.random.default_rng(i)
    tokens = rng.uniform(-1, 1, size=(3, DIM)).astype(np.float32)
    tokens[0, i % DIM] = 4.0
    return {"tokens": tokens, "pooled": tokens.mean(axis=0)}


def same(a: cellar.SearchResult, b: cellar.SearchResult) -> None:
    assert a.ids == b.ids
    assert a.scores == pytest.approx(b.scores, abs=1e-6)
    assert a.texts == b.texts


def test_the_client_answers_as_the_index_does(served: tuple[cellar.Index, cellar.Client]) -> None:
    index, client = served
    for mode in ["dense", "dense-exact", "ivf"]:
        same(client.search(mode=mode, k=5, query_vectors=query(3)), index.search("", mode=mode, k=5, query_vectors=query(3)))
    lists = {"tokens": query(4)["tokens"].tolist(), "pooled": query(4)["pooled"].tolist()}
    same(client.search(mode="dense", k=5, query_vectors=lists), index.search("", mode="dense", k=5, query_vectors=lists))
    same(client.search("topic7", mode="bm25", k=3), index.search("topic7", mode="bm25", k=3))
    bare = query(5)["tokens"]  # a bare (n, dim) array: the tokens; no text: dense
    same(client.search(query_vectors=bare, k=4), index.search(query_vectors=bare, k=4))
    same(client.search(query_vectors=bare, mode="dense-exact", k=4), index.search(query_vectors=bare, mode="dense-exact", k=4))
    hits = client.search(mode="dense", k=2, query_vectors=by_vector(5))
    assert isinstance(hits, cellar.SearchResult) and hits.params["mode"] == "dense" and len(hits) == 2


def test_batches_match_single_searches_locally_and_over_http(served: tuple[cellar.Index, cellar.Client]) -> None:
    index, client = served
    batch = [{"query_vectors": query(i)} for i in range(7)] + [{"query": "topic3", "mode": "bm25"}]
    local = index.search_batch(batch, mode="dense", k=4)
    remote = client.search_batch(batch, mode="dense", k=4)
    assert len(local) == len(remote) == 8
    for i in range(7):
        single = index.search("", mode="dense", k=4, query_vectors=query(i))
        same(local[i], single)
        same(remote[i], single)
    same(local[7], index.search("topic3", mode="bm25", k=4))
    same(remote[7], local[7])
    bm25 = index.search_batch(["topic3", {"query": "topic5", "k": 2}], mode="bm25", k=3)
    assert [len(r) for r in bm25] == [3, 2]
    assert all("topic5" in t for t in bm25[1].texts)
    assert index.search_batch([]) == []


def test_errors_keep_their_type_and_code_over_http(served: tuple[cellar.Index, cellar.Client]) -> None:
    index, client = served
    with pytest.raises(cellar.InvalidInputError, match="no model") as remote:
        client.search("needs encoding", mode="dense")
    assert remote.value.code == "invalid_input"
    with pytest.raises(cellar.InvalidInputError) as wrong:
        client.search(mode="dense", query_vectors={"tokens": [[1.0, 2.0]], "pooled": [1.0, 2.0]})
    assert wrong.value.code in {"wrong_dimension", "invalid_input"}
    with pytest.raises(cellar.InvalidInputError, match="k"):
        client.search(mode="dense", k=0, query_vectors=query(1))
    with pytest.raises(cellar.InvalidInputError, match=r"queries\[1\]"):
        client.search_batch([{"query_vectors": query(1)}, "needs encoding"], mode="dense")
    with pytest.raises(cellar.InvalidInputError, match=r"queries\[1\]"):
        index.search_batch([{"query_vectors": query(1)}, "needs encoding"], mode="dense")
    with pytest.raises(TypeError, match=r"queries\[0\]"):
        index.search_batch([3])
    with pytest.raises(cellar.InvalidInputError, match="http"):
        cellar.Client("127.0.0.1:1")


def doc_tokens(seed: int, n: int = 3) -> np.ndarray:
    """Token vectors of a written document: random, far from the axes the built ones hold."""
    return np.random.default_rng(1000 + seed).normal(size=(n, DIM)).astype(np.float32)


def test_writes_round_trip_on_the_served_index(served: tuple[cellar.Index, cellar.Client]) -> None:
    index, client = served
    w1, w2, w3 = doc_tokens(1), doc_tokens(2), doc_tokens(3)
    # Columns, as from_embeddings takes them.
    report = client.add(["w1", "w2"], [w1, w2], texts=["zebra one", "zebra two"], metadata=[{"color": "red"}, None])
    assert (report["added"], report["docs"]) == (2, 62)
    assert client.get("w1") == {"id": "w1", "internal_id": 60, "title": "", "text": "zebra one", "metadata": {"color": "red"}}
    assert client.get("w2")["metadata"] == {}
    assert index.get("w1")["text"] == "zebra one", "the server's write is the index's"
    assert sorted(client.search("zebra", mode="bm25").ids) == ["w1", "w2"]
    # A bare token array is the query's tokens; without text the mode is dense.
    found = client.search(query_vectors=w1, k=1)
    assert found.ids == ["w1"] and found.params["mode"] == "dense"
    assert client.search(query_vectors=w2, mode="dense-exact", k=1).ids == ["w2"]
    # Dicts, with a bare token array as vectors.
    client.update({"id": "w1", "text": "zebra uno", "metadata": {"color": "blue"}, "vectors": w3})
    assert client.get("w1")["text"] == "zebra uno"
    assert client.search(query_vectors=w3, k=1).ids == ["w1"]
    assert client.search("zebra", mode="bm25", filter={"color": "blue"}).ids == ["w1"]
    # A raw batch, applied in order.
    report = client.write([{"add": {"id": "w3", "text": "zebra tres", "vectors": {"tokens": w2.tolist()}}}, {"delete": "w2"}])
    assert (report["added"], report["deleted"]) == (1, 1)
    assert client.get("w2") is None
    assert client.delete(filter={"color": "blue"})["deleted"] == 1
    assert client.get("w1") is None
    assert client.delete("w3")["deleted"] == 1
    assert client.search("zebra", mode="bm25").ids == []
    # Ids that are not URL-safe travel as one path segment.
    client.add([{"id": "a b/c?d", "text": "odd id", "vectors": w1}])
    assert client.get("a b/c?d")["text"] == "odd id"
    assert client.delete(["a b/c?d"])["deleted"] == 1
    live = client.live_stats()
    assert live["written"] == 5 and live["deleted"] == 5
    with pytest.raises(cellar.NotFoundError) as missing:
        client.delete("w3")
    assert missing.value.code == "not_found" and missing.value.status == 404
    with pytest.raises(cellar.InvalidInputError, match="exists"):
        client.add([{"id": "d1", "vectors": w1}])
    with pytest.raises(cellar.NotFoundError):
        client.update(["nope"], [w1])


def test_named_indexes_are_created_searched_written_and_dropped(served: tuple[cellar.Index, cellar.Client]) -> None:
    _, client = served
    ids, vectors, texts = documents(12, seed=9)
    news = client.create_index("news", ids, vectors, texts=texts, metadata=[{"n": i} for i in range(12)], ivf=True)
    assert isinstance(news, cellar.RemoteIndex) and news.name == "news"
    assert "news" in client.indexes()
    assert news.info()["docs"] == 12
    assert news.search("topic3", mode="bm25", k=1).ids == ["d3"]
    assert news.search(query_vectors=by_vector(5)["tokens"], k=1).ids == ["d5"]
    batch = news.search_batch([{"query_vectors": vectors[7]}, {"query": "topic2", "mode": "bm25"}], k=1)
    assert [r.ids for r in batch] == [["d7"], ["d2"]]
    assert news.search("topic4", mode="bm25", filter={"n": 4}).ids == ["d4"]
    news.add({"id": "x", "text": "xylophone", "vectors": doc_tokens(4)})
    assert client.index("news").get("x")["text"] == "xylophone"
    assert client.get("x") is None, "the --index is another index"
    assert news.delete(["x", "d0"])["deleted"] == 2
    assert news.live_stats()["deleted"] == 2
    with pytest.raises(cellar.InvalidInputError, match="exists"):
        client.create_index("news", ids[:1], vectors[:1])
    with pytest.raises(cellar.InvalidInputError):
        client.create_index("bad name!", ids[:1], vectors[:1])
    assert client.drop_index("news") == {"dropped": True, "index": "news"}
    assert "news" not in client.indexes()
    with pytest.raises(cellar.NotFoundError):
        news.search("topic3", mode="bm25")
    with pytest.raises(cellar.NotFoundError, match="no index"):
        news.get("d3")


def test_an_index_created_empty_is_filled_by_add(served: tuple[cellar.Index, cellar.Client]) -> None:
    _, client = served
    ids, vectors, texts = documents(12, seed=4)
    notes = client.create_index("notes", dim=len(vectors[0][0]))
    assert notes.info()["docs"] == 0 and notes.info()["codec"] == "f16"
    assert notes.search(query_vectors=by_vector(5)["tokens"], mode="dense-exact", k=3).ids == []
    notes.add([{"id": i, "text": t, "vectors": v} for i, t, v in zip(ids, texts, vectors)])
    assert notes.info()["docs"] == 12
    assert notes.search(query_vectors=by_vector(5)["tokens"], mode="dense-exact", k=1).ids == ["d5"]
    assert notes.search("topic3", mode="bm25", k=1).ids == ["d3"]
    with pytest.raises(cellar.InvalidInputError, match="codec residual2"):
        client.create_index("other", dim=16, codec="residual2")
    assert "other" not in client.indexes()
    assert client.drop_index("notes")["dropped"]


def test_a_stream_is_written_searched_read_and_deleted(served: tuple[cellar.Index, cellar.Client]) -> None:
    _, client = served
    notes = client.stream("notes")
    assert isinstance(notes, cellar.RemoteStream)
    bread, flour, jazz = doc_tokens(5), doc_tokens(6), doc_tokens(7)
    seq = notes.put("alice", "n1", "buy bread", metadata={"kind": "todo"}, tokens=bread)
    assert isinstance(seq, int) and seq >= 1
    last = notes.put_batch(
        [
            {"group": "alice", "id": "n2", "text": "flour too", "tokens": flour.tolist(), "metadata": {"kind": "idea"}},
            {"group": "bob", "id": "n1", "text": "jazz tonight", "tokens": jazz.tolist()},
        ]
    )
    assert last > seq
    assert notes.get("alice", "n1") == {
        "group": "alice", "id": "n1", "seq": seq, "text": "buy bread", "n_tokens": 3, "metadata": {"kind": "todo"}
    }
    hits = notes.search("alice", query_tokens=flour, k=2)
    assert [h["id"] for h in hits] == ["n2", "n1"] and hits[0]["text"] == "flour too"
    assert [h["id"] for h in notes.search("alice", query_tokens=jazz, k=5, filter={"kind": "todo"})] == ["n1"]
    long_form = {"and": [{"eq": {"field": "kind", "value": "idea"}}]}
    assert [h["id"] for h in notes.search("alice", query_tokens=jazz, k=5, filter=long_form)] == ["n2"]
    # Issue 46: a stream runs the index's whole filter grammar (it ran equality only before).
    either = notes.search("alice", query_tokens=jazz, k=5, filter={"kind": ["todo", "idea"]})
    assert sorted(h["id"] for h in either) == ["n1", "n2"]
    assert [h["id"] for h in notes.search("alice", query_tokens=jazz, filter={"or": [{"kind": "todo"}]})] == ["n1"]
    bare = notes.search("bob", query_tokens=jazz, k=1, include_text=False)
    assert bare == [{"id": "n1", "score": pytest.approx(bare[0]["score"]), "text": None, "metadata": {}}]
    assert notes.stats()["last_seq"] == last
    # A sequence number is a document's version: a delete takes none (issue 46: one engine).
    assert notes.delete("alice", "n1") == last
    with pytest.raises(cellar.NotFoundError):
        notes.get("alice", "n1")
    with pytest.raises(cellar.NotFoundError):
        notes.delete("alice", "n1")
    with pytest.raises(cellar.InvalidInputError):
        notes.put("alice", "n3", "wrong dimension", tokens=[[1.0, 2.0]])
    assert notes.drop() == {"deleted": True, "stream": "notes"}
    with pytest.raises(cellar.NotFoundError):
        notes.stats()


def test_health_metrics_and_the_api_document(served: tuple[cellar.Index, cellar.Client]) -> None:
    _, client = served
    health = client.health()
    assert health["status"] == "ok" and health["streams"] is True and health["model_dim"] == DIM
    assert "cellar_requests_total" in client.metrics()
    assert "/v1/search" in client.openapi()["paths"]


def test_every_route_of_the_api_is_reached_by_a_client_method(
    served: tuple[cellar.Index, cellar.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tour of every method records the (method, path) each sends; every operation of the
    server's OpenAPI document must be among them, so a new route fails here until the client
    has it."""
    _, client = served
    operations = {(m.upper(), path) for path, ops in client.openapi()["paths"].items() for m in ops}
    sent: set[tuple[str, str]] = set()
    request = cellar._client._Http.request

    def recording(self: object, method: str, path: str, body: object = None) -> bytes:
        sent.add((method, path))
        return request(self, method, path, body)  # type: ignore[arg-type]

    monkeypatch.setattr(cellar._client._Http, "request", recording)
    v = doc_tokens(8)
    for target in (client, client.create_index("tour", ["a"], [v])):
        target.search(query_vectors=v, mode="dense-exact", k=1)
        target.search_batch([{"query_vectors": v}], mode="dense-exact", k=1)
        target.add(["b", "c"], [v, v])
        target.get("b")
        target.delete("b")
        target.delete(["c"])
    client.index("tour").info()
    client.indexes()
    client.drop_index("tour")
    tour = client.stream("tour")
    tour.put("g", "1", tokens=v)
    tour.put_batch([{"group": "g", "id": "2", "tokens": v.tolist()}])
    tour.get("g", "1")
    tour.search("g", query_tokens=v)
    tour.delete("g", "1")
    tour.stats()
    tour.drop()
    client.health(), client.metrics(), client.openapi()

    def template(path: str) -> str:
        return re.sub(r"/(indexes|streams|groups|docs)/[^/]+", r"/\1/{\1}", path)

    reached = {(method, template(path)) for method, path in sent}
    names = {"{indexes}": "{name}", "{streams}": "{name}", "{groups}": "{group}", "{docs}": "{id}"}
    reached = {(m, "".join(names.get(part, part) for part in re.split(r"(\{\w+\})", p))) for m, p in reached}
    api = sorted(op for op in operations if op[1].startswith("/v1/") or op[1] in {"/healthz", "/metrics", "/openapi.json"})
    assert len(api) >= 24 and ("PUT", "/v1/streams/{name}/groups/{group}/docs/{id}") in reached
    assert [op for op in api if op not in reached] == []


def test_an_api_key_is_taken_from_the_argument_or_the_environment(
    server: tuple[cellar.Index, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = server
    monkeypatch.delenv("CELLAR_API_KEY", raising=False)
    keyless = cellar.Client(url)
    with pytest.raises(cellar.UnauthorizedError, match="required") as refused:
        keyless.search("topic3", mode="bm25")
    assert refused.value.code == "unauthorized" and refused.value.status == 401
    assert isinstance(refused.value, PermissionError)
    with pytest.raises(cellar.UnauthorizedError):
        keyless.stream("s").put("g", "1", tokens=[[1.0] * DIM])
    assert keyless.health()["status"] == "ok", "/healthz needs no key"
    with pytest.raises(cellar.UnauthorizedError, match="wrong"):
        cellar.Client(url, api_key="not-it").indexes()
    assert cellar.Client(url, api_key=KEY).search("topic3", mode="bm25", k=1).ids
    monkeypatch.setenv("CELLAR_API_KEY", KEY)
    assert cellar.Client(url).search("topic3", mode="bm25", k=1).ids
    monkeypatch.setenv("CELLAR_API_KEY", "not-it")
    with pytest.raises(cellar.UnauthorizedError):
        cellar.Client(url).indexes()
    assert isinstance(cellar.Client(url, api_key=KEY).indexes(), list), "the argument wins over the environment"
    with pytest.raises(cellar.InvalidInputError, match="api_key"):
        cellar.Client(url, api_key="")


def test_bad_input_raises_invalid_input_before_or_from_the_server(served: tuple[cellar.Index, cellar.Client]) -> None:
    _, client = served
    v = doc_tokens(9)
    with pytest.raises(cellar.InvalidInputError, match="texts has 1 items, fewer than doc_vectors"):
        client.add(["e1", "e2"], [v, v], texts=["one"])
    with pytest.raises(cellar.InvalidInputError, match="ids has more items than doc_vectors"):
        client.add(["e1", "e2"], [v])
    with pytest.raises(cellar.InvalidInputError, match="ids need doc_vectors"):
        client.add(["e1"], texts=["no vectors"])
    with pytest.raises(cellar.InvalidInputError, match="take no doc_vectors"):
        client.add([{"id": "e1"}], [v])
    with pytest.raises(cellar.InvalidInputError, match="no 'id'"):
        client.add([{"text": "anonymous", "vectors": v}])
    with pytest.raises(cellar.InvalidInputError) as wrong:
        client.add(["e1"], [np.ones((1, 2), dtype=np.float32)])
    assert wrong.value.code == "wrong_dimension" and wrong.value.details["expected"] == DIM
    with pytest.raises(cellar.InvalidInputError, match="finite|NaN|non-finite"):
        client.search(query_vectors=np.full((1, DIM), np.nan, dtype=np.float32))
    with pytest.raises(cellar.InvalidInputError, match="query text, query_vectors"):
        client.search()
    with pytest.raises(cellar.InvalidInputError, match="needs ids"):
        client.delete()
    with pytest.raises(cellar.InvalidInputError, match="numbers"):
        client.search(query_vectors=[["a", "b"]])
    with pytest.raises(TypeError, match="colour"):
        client.search("x", colour="red")
    with pytest.raises(cellar.InvalidInputError, match="api_key"):
        cellar.Client("http://127.0.0.1:1", api_key="two\nlines")
    assert client.get("e1") is None, "no refused write wrote anything"


def test_no_answer_raises_unreachable() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(cellar.UnreachableError) as refused:
        cellar.Client(f"http://127.0.0.1:{port}").health()
    assert refused.value.code == "unreachable" and isinstance(refused.value, ConnectionError)
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        with pytest.raises(cellar.UnreachableError, match="no answer within") as late:
            cellar.Client(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.2).search("x")
    assert late.value.code == "timeout"


def test_every_documented_error_code_raises_its_own_class() -> None:
    """Each code of docs/server.md's error table maps to a class more precise than CellarError;
    an unknown code falls back on its HTTP status."""
    table = (ROOT / "docs/server.md").read_text().split("## Errors", 1)[1]
    rows = re.findall(r"^\| (\d{3}) \| ([^|]+) \|", table, flags=re.M)
    codes = [(int(status), code) for status, cell in rows for code in re.findall(r"`(\w+)`", cell)]
    assert len(codes) >= 20
    for status, code in codes:
        error = cellar._client.error_from_answer({"code": code, "message": "m", "details": {}}, status)
        assert type(error) is not cellar.CellarError and error.code == code, (status, code)
    assert isinstance(cellar._client.error_from_answer({"code": "disk_full", "message": "m"}, 507), OSError)
    unknown = cellar._client.error_from_answer({"code": "brand_new", "message": "m"}, 429)
    assert isinstance(unknown, cellar.OverloadedError) and unknown.code == "brand_new"
    proxy = cellar._client.error_from_answer(b"<html>bad gateway</html>", 502)
    assert isinstance(proxy, cellar.UnreachableError) and proxy.code == "http"


def test_documents_turns_both_write_shapes_into_dicts() -> None:
    from cellar._docs import documents as docs_of

    v = np.zeros((2, DIM), dtype=np.float32)
    w = np.ones((1, DIM), dtype=np.float32)
    # Columns are read by from_embeddings' own reader; their vectors come back compact (base64).
    a, b = docs_of(["a", 7], (x for x in [v, w]), texts=["t", None], pooled=[None, w[0]], metadata=[None, {"k": 1}])
    values = lambda b64: np.frombuffer(base64.b64decode(b64), dtype="<f4")  # noqa: E731
    assert (a["id"], a["text"], "metadata" in a, sorted(a["vectors"])) == ("a", "t", False, ["dtype", "tokens_b64"])
    assert np.array_equal(values(a["vectors"]["tokens_b64"]), v.ravel())
    assert (b["id"], b["text"], b["metadata"]) == ("7", "", {"k": 1})
    assert np.array_equal(values(b["vectors"]["pooled_b64"]), w[0])
    (rows,) = docs_of(["r"], [w], compact=False)
    assert rows["vectors"] == {"tokens": w.tolist()}
    (single,) = docs_of({"id": 3, "vectors": v})
    assert single["id"] == "3" and single["vectors"]["tokens"] is v
    assert docs_of([]) == []
    for bad, says in [
        (lambda: docs_of("abc", [v]), "got str"),
        (lambda: docs_of(["a", {"id": "b"}], [v]), "either every item"),
        (lambda: docs_of(["a"], [v], metadata=["x"]), r"metadata\[0\]"),
        (lambda: docs_of([1.5], [v]), r"ids\[0\]"),
        (lambda: docs_of(["a"], [v], pooled=v), "pooled has more items than doc_vectors"),
        (lambda: docs_of([{"id": "a", "vectors": "x"}]), r"documents\[0\]\['vectors'\]"),
    ]:
        with pytest.raises(cellar.InvalidInputError, match=says):
            bad()
    # As Index.from_embeddings: a value that is not a float array is a TypeError.
    for bad, says in [
        (lambda: docs_of(["a"], [v], texts=[3]), r"texts\[0\]"),
        (lambda: docs_of(["a"], [None]), r"doc_vectors\[0\]"),
    ]:
        with pytest.raises(TypeError, match=says):
            bad()
