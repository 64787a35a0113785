"""The query encoder of the ingress: the write-side embedder's model, run by ONNX Runtime (optionally int8).

A search or an ask embeds one short query on the request path, where a sentence-transformers forward pass
in torch is a large share of a search's time on a CPU. ``OnnxQueryEncoder`` runs the same model exported once to
ONNX: the float export (``onnx``, the default) gives the same vectors in a fraction of torch's time on one core;
the int8 one (``onnx-int8``: weights quantized per channel by ``onnxruntime.quantization.quantize_dynamic``) is
faster still, its vectors close to the float model's but not equal (``bench.query_encoder`` measures all three,
and the recall of LoCoMo evidence they give: docs/results/2026-12-02-scale.md). Stored texts are always embedded
by the float model (``serve.embedder.Embedder``); only queries take this path.

The export runs once per model and weights file, into ``<cache_dir>/onnx/``, written under a temporary name
and renamed, so replicas starting together never read a half-written file.

    encoder = build_query_encoder(config.embedder, cache_dir=config.paths.cache_dir)
    vectors = encoder.encode(["when did Caroline move?"], is_query=True)
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.config import EmbedderConfig
from core.files import replaced_atomically
from serve.embedder import Embedder, ModelNotAvailableError, resolve_embedder_path

logger = logging.getLogger(__name__)

EXPORT_VERSION = 1  # NOTE: bump when the export changes, so cached graphs of an older export are not reused
ONNX_OPSET = 17
_SUPPORTED_MODULES = {
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
}


class SentenceModelSpec:
    """What the ONNX path needs to know of a sentence-transformers folder: pooling, normalisation, window."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        modules = json.loads((folder / "modules.json").read_text()) if (folder / "modules.json").exists() else None
        if modules is None:
            raise ModelNotAvailableError(f"{folder} is not a sentence-transformers folder (no modules.json)")
        kinds = {m["type"] for m in modules}
        if not kinds <= _SUPPORTED_MODULES:
            raise ModelNotAvailableError(
                f"the ONNX query encoder runs Transformer + Pooling (+ Normalize) models; {folder} also has "
                f"{sorted(kinds - _SUPPORTED_MODULES)}: set embedder.query_runtime: torch"
            )
        pooling_dir = next(folder / m["path"] for m in modules if m["type"].endswith(".Pooling"))
        pooling = json.loads((pooling_dir / "config.json").read_text())
        if pooling.get("pooling_mode_mean_tokens"):
            self.pooling = "mean"
        elif pooling.get("pooling_mode_cls_token"):
            self.pooling = "cls"
        else:
            raise ModelNotAvailableError(
                f"the ONNX query encoder pools by mean or CLS token; {pooling_dir} asks for another mode: "
                "set embedder.query_runtime: torch"
            )
        self.normalize = any(m["type"].endswith(".Normalize") for m in modules)
        st_config = folder / "sentence_bert_config.json"
        self.max_seq_length = int(json.loads(st_config.read_text()).get("max_seq_length", 512)) if (
            st_config.exists()) else 512

    def fingerprint(self) -> str:
        """Changes when the weights or the export change: names the cached graphs."""
        h = hashlib.blake2b(digest_size=8)
        h.update(f"{EXPORT_VERSION}|{ONNX_OPSET}|{self.folder.resolve()}".encode())
        for weights in sorted(self.folder.glob("*.safetensors")) + sorted(self.folder.glob("*.bin")):
            stat = weights.stat()
            h.update(f"|{weights.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        return h.hexdigest()


def export_onnx(spec: SentenceModelSpec, target: Path) -> None:
    """The transformer of ``spec`` (last hidden state; pooling runs in numpy) -> ONNX graph at ``target``."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec.folder)
    model = AutoModel.from_pretrained(spec.folder).eval()
    # NOTE: traced with padding in the batch, so that the graph keeps the attention mask (a mask of all ones
    # can be traced as "no mask", which would let padded queries attend to padding)
    sample = dict(tokenizer(["a query", "a longer query with padding after the first"], padding=True,
                            return_tensors="pt"))
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class LastHidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    axes = {n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]}
    with replaced_atomically(target) as tmp, torch.no_grad(), warnings.catch_warnings():
        # NOTE: the tracer warns about shape checks it folds into constants and about how it exports
        # indexing; tests/models/test_query_encoder.py checks the graph on other lengths and padded batches
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHidden(model), tuple(sample[n] for n in names), str(tmp), input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=ONNX_OPSET,
                          dynamo=False)


def quantize_onnx(source: Path, target: Path) -> None:
    """int8 weights, per output channel, activations quantized at run time (dynamic)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with replaced_atomically(target) as tmp:
        quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8, per_channel=True)


def onnx_graph(spec: SentenceModelSpec, cache_dir: Path, *, int8: bool) -> Path:
    """The cached graph for ``spec``, exported (and quantized) on first use."""
    folder = Path(cache_dir) / "onnx" / f"{spec.folder.name}-{spec.fingerprint()}"
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / "model.onnx"
    if not fp32.exists():
        logger.info("exporting %s to ONNX (once; cached in %s)", spec.folder, folder)
        export_onnx(spec, fp32)
    if not int8:
        return fp32
    quantized = folder / "model.int8.onnx"
    if not quantized.exists():
        logger.info("quantizing %s to int8", fp32)
        quantize_onnx(fp32, quantized)
    return quantized


class OnnxQueryEncoder:
    """Encodes texts like ``Embedder`` with the model exported to ONNX Runtime. Thread-safe (ORT sessions are)."""

    def __init__(self, config: EmbedderConfig, cache_dir: Path, *, int8: bool = True) -> None:
        import onnxruntime as ort
        from transformers import AutoTokenizer

        self.config = config
        self.name = config.model
        folder = Path(resolve_embedder_path(config.model))
        if not folder.is_dir():
            raise ModelNotAvailableError(
                f"the ONNX query encoder needs the embedder's weights in a local folder, not {config.model!r}: "
                "set embedder.query_runtime: torch"
            )
        self.spec = SentenceModelSpec(folder)
        self.int8 = int8
        self.path = onnx_graph(self.spec, cache_dir, int8=int8)
        options = ort.SessionOptions()
        # NOTE: one short query is fastest on one core (2 threads were slower on 2 cores); batches use more
        options.intra_op_num_threads = config.num_threads or 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._tokenizer = AutoTokenizer.from_pretrained(folder)
        self.dim = int(self._session.get_outputs()[0].shape[-1])
        logger.info("query encoder %s: ONNX Runtime%s, %s", self.name, " int8" if int8 else "", self.path)

    def encode(self, texts: Sequence[str], *, is_query: bool = False, batch_size: int | None = None,
               progress: bool = False) -> np.ndarray:
        """Embed ``texts`` -> float32 array (len(texts), dim), rows of unit length if the model normalises."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        prefix = self.config.query_prefix if is_query else self.config.passage_prefix
        texts = [prefix + t for t in texts] if prefix else list(texts)
        # NOTE: int8 activations are quantized with one scale per call, taken over the whole padded batch: a
        # query's vector would depend on the queries batched with it, so the int8 graph sees one text at a time
        step = 1 if self.int8 else batch_size or self.config.batch_size
        return np.concatenate([self._encode_batch(texts[i:i + step]) for i in range(0, len(texts), step)])

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        batch = self._tokenizer(texts, padding=True, truncation=True, max_length=self.spec.max_seq_length,
                                return_tensors="np")
        feeds = {name: np.asarray(batch[name], dtype=np.int64) for name in self._inputs}
        hidden = self._session.run(None, feeds)[0]
        if self.spec.pooling == "cls":
            vectors = hidden[:, 0]
        else:
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        if self.spec.normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(vectors, dtype=np.float32)


def build_query_encoder(config: EmbedderConfig, cache_dir: Path) -> Any:
    """What ``embedder.query_runtime`` names: ``torch`` (the write side's ``Embedder``), ``onnx``, ``onnx-int8``."""
    if config.query_runtime == "torch":
        return Embedder(config)
    return OnnxQueryEncoder(config, cache_dir, int8=config.query_runtime == "onnx-int8")
