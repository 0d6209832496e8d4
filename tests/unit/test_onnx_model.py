"""The bundled model on ONNX Runtime: the same vectors as sentence-transformers, exported once into a cache
checked by its checksum, and a `query` that never imports torch once the export is there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent_retrieval.context import Context
from agent_retrieval.providers import onnx_model
from agent_retrieval.providers.embeddings import LocalEmbeddings, bundled_model_path, make_embedder

pytestmark = pytest.mark.slow

TEXTS = [
    "deposit",
    "How long does the landlord have to protect the tenancy deposit?",
    "The tenancy deposit of £2,100 is protected with the DPS under reference DPS-7781-2293. "
    * 40,  # truncated
    "Ünïcödé, emoji 🏠 and CJK 租金押金",
    "",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("onnx-cache")
    assert onnx_model.load(bundled_model_path(), folder, "onnx") is not None  # exports once
    return folder


@pytest.fixture
def int8_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU with 8-bit products, where queries run on the copy, whatever this machine has."""
    monkeypatch.setattr(onnx_model, "int8_products", lambda: True)


def test_onnx_vectors_equal_sentence_transformers(cache):
    onnx = LocalEmbeddings(runtime="onnx", cache=str(cache)).embed_documents(TEXTS)
    torch = LocalEmbeddings(runtime="torch").embed_documents(TEXTS)
    cosines = np.sum(np.asarray(onnx) * np.asarray(torch), axis=1)
    assert cosines.min() >= 0.9999, cosines
    model = onnx_model.load(bundled_model_path(), cache, "onnx")
    alone = model.encode([TEXTS[1]])[0]
    assert float(np.dot(alone, onnx[1])) >= 0.9999  # one thread or all, alone or in a batch: the same


@pytest.mark.usefixtures("int8_cpu")
def test_a_query_runs_on_an_8_bit_copy_made_once_beside_the_export(cache):
    """A lone query reads the whole model from memory; the copy's 8-bit matrix weights make it faster. Its
    vectors stay within cosine 0.998 of the float model's; stored vectors never come from it."""
    model = onnx_model.load(bundled_model_path(), cache, "onnx")
    copy = onnx_model.query_file(model.path)
    assert model.query_path == copy and copy.with_suffix(".sha256").exists()
    assert copy.stat().st_size < 0.7 * model.path.stat().st_size
    made = copy.stat().st_mtime_ns
    assert onnx_model.load(bundled_model_path(), cache, "onnx").query_path == copy
    assert copy.stat().st_mtime_ns == made  # made once

    embeddings = LocalEmbeddings(runtime="onnx", cache=str(cache))
    for text in TEXTS:
        query = np.asarray(embeddings.embed_query(text))
        assert np.array_equal(query, model.encode([text], query=True)[0])
        stored = np.asarray(embeddings.embed_documents([text])[0])
        assert np.array_equal(stored, model.encode([text])[0])
        assert 0.998 <= float(query @ stored) < 0.99999  # the copy's, not the float model's ("": 0.9985)


@pytest.mark.parametrize("logging_set_up", [False, True], ids=["logging not set up", "logging at INFO"])
def test_making_the_copy_leaves_the_callers_logging_as_it_was(cache, tmp_path, logging_set_up):
    """ONNX Runtime's quantizer calls logging.basicConfig when imported (in a program that has not set up
    logging, every INFO record of every library would print from then on) and logs each node it passes over
    at INFO (a program logging at INFO would print hundreds of lines)."""
    exported = onnx_model.model_file(bundled_model_path(), cache)
    (tmp_path / exported.name).write_bytes(exported.read_bytes())
    probe = (
        "import logging, sys\n"
        "from pathlib import Path\n"
        "from agent_retrieval.providers import onnx_model\n"
        f"{'logging.basicConfig(level=logging.INFO)' if logging_set_up else ''}\n"
        "before = list(logging.getLogger().handlers), logging.getLogger().level\n"
        "made = onnx_model.query_copy(Path(sys.argv[1]))\n"
        "print(made is not None, before == (logging.getLogger().handlers, logging.getLogger().level))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / exported.name)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
    assert "skip to quantize" not in done.stderr


@pytest.mark.usefixtures("int8_cpu")
async def test_an_awaited_query_runs_on_the_copy_too(cache):
    embeddings = LocalEmbeddings(runtime="onnx", cache=str(cache))
    model = onnx_model.load(bundled_model_path(), cache, "onnx")
    awaited = np.asarray(await embeddings.aembed_query(TEXTS[1]))
    assert np.array_equal(awaited, model.encode([TEXTS[1]], query=True)[0])
    stored = np.asarray((await embeddings.aembed_documents([TEXTS[1]]))[0])
    assert np.array_equal(stored, model.encode([TEXTS[1]])[0])


def export_only(cache: Path, folder: Path) -> Path:
    """The cached export and its checksum copied into `folder`, without an 8-bit copy."""
    exported = onnx_model.model_file(bundled_model_path(), cache)
    for source in (exported, exported.with_suffix(".sha256")):
        (folder / source.name).write_bytes(source.read_bytes())
    return exported


@pytest.mark.usefixtures("int8_cpu")
def test_the_copy_is_made_at_the_first_query_not_by_embedding_documents(cache, tmp_path):
    export_only(cache, tmp_path)
    model = onnx_model.load(bundled_model_path(), tmp_path, "onnx")
    model.encode(TEXTS[:3])
    model.encode([TEXTS[1]])
    assert not onnx_model.query_file(model.path).exists()  # an ingest never makes or reads it
    model.encode([TEXTS[1]], query=True)
    assert onnx_model.query_file(model.path).exists()


def test_a_cpu_without_8_bit_products_keeps_queries_on_the_float_model(cache, tmp_path, monkeypatch):
    """Without one instruction for 8-bit products ONNX Runtime emulates them, and the copy ran slower than
    the float model (AVX2 only: 14.5 against 13.1 ms a query, p95 25.0 against 19.4): there no copy is made
    and a query runs on the float model."""
    export_only(cache, tmp_path)
    monkeypatch.setattr(onnx_model, "int8_products", lambda: False)
    model = onnx_model.load(bundled_model_path(), tmp_path, "onnx")
    assert np.array_equal(model.encode([TEXTS[1]], query=True), model.encode([TEXTS[1]]))
    assert model.query_path is None and not onnx_model.query_file(model.path).exists()


@pytest.mark.usefixtures("int8_cpu")
def test_without_the_quantizer_queries_run_on_the_float_model(cache, tmp_path, monkeypatch, caplog):
    model_dir = bundled_model_path()
    exported = export_only(cache, tmp_path)

    def missing(path, staged):
        raise ImportError("No module named 'onnx_ir'")

    monkeypatch.setattr(onnx_model, "_quantize", missing)
    model = onnx_model.load(model_dir, tmp_path, "onnx")
    assert model is not None and model.query_path is None
    assert "queries run on the float model" in caplog.text and "onnx_ir" in caplog.text
    assert np.array_equal(model.encode([TEXTS[1]], query=True), model.encode([TEXTS[1]]))
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted([exported.name, f"{exported.stem}.sha256"])


@pytest.mark.usefixtures("int8_cpu")
def test_a_copy_this_onnx_runtime_cannot_run_leaves_queries_on_the_float_model(cache, monkeypatch, caplog):
    model = onnx_model.load(bundled_model_path(), cache, "onnx")
    made = onnx_model._session

    def session(path, *, threads):
        if path == model.query_path:
            raise RuntimeError("Could not find an implementation for MatMulNBits(1) node")
        return made(path, threads=threads)

    monkeypatch.setattr(onnx_model, "_session", session)
    assert np.array_equal(model.encode([TEXTS[1]], query=True), model.encode([TEXTS[1]]))
    assert "does not load" in caplog.text and "MatMulNBits" in caplog.text


def test_each_run_of_the_model_holds_a_bounded_number_of_tokens(cache):
    """Attention's memory grows with texts x tokens², and ONNX Runtime keeps its largest run: 64 long texts
    at once held 2 GB. Texts of every length, long ones many times over, still embed alike."""
    model = onnx_model.load(bundled_model_path(), cache, "onnx")
    runs: list[tuple[int, int]] = []
    session = model.batch

    class Recorded:
        def run(self, names, feed):
            runs.append(feed["input_ids"].shape)
            return session.run(names, feed)

    model.batch = Recorded()
    texts = [TEXTS[2]] * 40 + [TEXTS[1]] * 100 + TEXTS
    vectors = model.encode(texts)
    assert max(rows * width for rows, width in runs) <= onnx_model._BATCH_TOKENS
    assert sum(rows for rows, _ in runs) == len(texts) and len(runs) < len(texts) / 4  # batched
    alone = np.concatenate([model.encode([text, text])[:1] for text in TEXTS])
    assert np.sum(vectors[-len(TEXTS) :] * alone, axis=1).min() >= 0.9999


def test_the_runtime_is_a_setting_and_torch_stays_the_fallback(cache):
    onnx = make_embedder(Context(local_runtime="onnx", local_model_cache=str(cache)).embeddings)
    torch = make_embedder(Context(local_runtime="torch").embeddings)
    assert onnx.model_id == torch.model_id == "local/all-MiniLM-L6-v2"  # equal vectors: one model id
    assert onnx.embeddings._onnx() is not None and torch.embeddings._onnx() is None


def test_the_same_weights_installed_again_find_their_export(tmp_path):
    """The export is named by the weights' content as their package's RECORD gives it: a reinstall gives the
    weights a new time, and naming by time added a 90 MB export (and its 8-bit copy) to the cache each time.
    Weights no package records (a folder of one's own) are still named by size and time."""
    weights = bundled_model_path() / "model.safetensors"
    named = onnx_model.model_file(bundled_model_path(), tmp_path)
    before = weights.stat()
    try:
        os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns + 10**12))  # as a reinstall leaves it
        assert onnx_model.model_file(bundled_model_path(), tmp_path) == named
    finally:
        os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    own = tmp_path / "own-model"
    own.mkdir()
    (own / "model.safetensors").write_bytes(b"weights")
    first = onnx_model.model_file(own, tmp_path)
    os.utime(own / "model.safetensors", ns=(0, 10**15))
    assert onnx_model.model_file(own, tmp_path) not in (first, named)


def test_a_cached_file_that_fails_its_checksum_is_exported_again(cache, tmp_path):
    folder = tmp_path / "cache"
    model_dir = bundled_model_path()
    onnx_model.load(model_dir, folder, "onnx")
    path = onnx_model.model_file(model_dir, folder)
    good = path.read_bytes()
    path.write_bytes(good[:1000])  # a torn or tampered file
    model = onnx_model.load(model_dir, folder, "onnx")
    assert path.read_bytes() == good and model is not None
    assert model.encode(["deposit"]).shape == (1, 384)


def test_query_on_a_warm_machine_never_imports_torch(cache, tmp_path):
    probe = (
        "import sys\n"
        "from agent_retrieval import cli\n"
        "code = cli.main(['ingest', '--no-progress', '--db', sys.argv[1], sys.argv[2]])\n"
        "code += cli.main(['query', '--no-progress', '--db', sys.argv[1], 'tenancy deposit', '-k', '1'])\n"
        "heavy = ('torch', 'sentence_transformers', 'transformers')\n"
        "print(code, sorted(name for name in heavy if name in sys.modules))\n"
    )
    from agent_retrieval import demo

    env = {**os.environ, "AGENT_RETRIEVAL_MODEL_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "q.db"), str(demo.corpus_dir())],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"
