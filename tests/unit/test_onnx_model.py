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


def test_onnx_vectors_equal_sentence_transformers(cache):
    onnx = LocalEmbeddings(runtime="onnx", cache=str(cache)).embed_documents(TEXTS)
    torch = LocalEmbeddings(runtime="torch").embed_documents(TEXTS)
    cosines = np.sum(np.asarray(onnx) * np.asarray(torch), axis=1)
    assert cosines.min() >= 0.9999, cosines
    single = LocalEmbeddings(runtime="onnx", cache=str(cache)).embed_query(TEXTS[1])
    assert float(np.dot(single, onnx[1])) >= 0.9999  # one thread or all, alone or in a batch: the same


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
