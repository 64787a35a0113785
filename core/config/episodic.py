"""Config sections of episodic memory (E-mem) and write-side admission (MemRouter)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.config.base import Section


class EpisodicConfig(Section):
    """Episodic memory (E-mem): segments, assistants' evidence extraction, the master's answer."""

    segment_tokens: int = Field(
        1024, ge=64, le=131_072,
        description="Segment size in tokens of the small model's tokenizer (E-mem: 4,096 with a 4k-context "
        "Qwen3 assistant; smaller here so a segment and its prompt fit the CPU engine's window).",
    )
    overlap_ratio: float = Field(
        0.1, ge=0, lt=1, description="Share of a full segment's tokens replayed at the start of the next (E-mem: ~10%)."
    )
    ground_dates: bool = Field(
        True, description="Write each turn's relative time expressions ('yesterday', 'last week', 'two years ago') "
        "resolved against the turn's local date into its line: '... yesterday [7 May 2023] ...' "
        "(memory/time_expressions.py). The line is what the router indexes, the assistants and the master read "
        "and an export keeps; the memory's own text stays as sent.",
    )
    summary_max_tokens: int = Field(48, gt=0, le=1024, description="Length cap of a segment summary (P_global).")
    evidence_per_segment: int = Field(
        5, gt=0, le=64, description="Most evidence lines an assistant returns for one segment (E-mem: 5)."
    )
    extraction: Literal["likelihood", "choose"] = Field(
        "likelihood",
        description="How assistants pick evidence lines: 'likelihood' = the router's line cosine + idf term match "
        "shortlist the segment's lines, the small model scores each by the question's likelihood after it (one "
        "scoring pass, no generation); 'choose' = the model names line numbers (E-mem; needs a capable model).",
    )
    shortlist: int = Field(
        5, gt=0, le=256,
        description="'likelihood' extraction: lines per segment the small model re-reads; each returned segment "
        "gives at most min(shortlist, evidence_per_segment) lines.",
    )
    speaker_prior: float = Field(
        0.0, ge=0, le=10,
        description="'likelihood' extraction: when the question names exactly one of a segment's speakers (by first "
        "name), the other speakers' lines lose this much of their shortlist score (line cosine + term match, ~0-2); "
        "0 (default) disables: on LoCoMo's train split such questions' evidence is nearly always the named "
        "speaker's, yet a prior kept no more evidence with the small model scoring, whose query likelihood already "
        "favours those lines (bench.extract_recall: docs/results/2026-12-03-episodic.md).",
    )
    answer_max_tokens: int = Field(24, gt=0, le=1024, description="Length cap of the master's short answer.")
    answer_examples: bool = Field(
        True, description="Show the master one worked example (train split) of the question's kind before the "
        "question, as an earlier chat turn: small models copy an answer's form better than they follow an "
        "instruction (inference/master.py: EXAMPLES). Its tokens come off the evidence budget.",
    )
    answer_form: Literal["free", "snap", "extract"] = Field(
        "free",
        description="How the master's short answers keep to the evidence's words (inference/answer_spans.py): 'free' "
        "generation, cleaned; 'snap': the free answer replaced by the evidence span closest to it (token F1 >= 0.5; "
        "a list item by item); 'extract': the answer chosen among the evidence lines' short phrases (a constrained "
        "choice), lists and yes/no questions as 'snap'. Dates and false-premise choices are unaffected.",
    )
    master_evidence: int = Field(
        12, gt=0, le=10_000,
        description="Most evidence lines the master reads (best-routed segments first); E-mem's aggregator "
        "likewise drops noise before answering.",
    )
    master_dates: Literal["line", "day"] = Field(
        "line",
        description="How the master's prompt dates its evidence lines: 'line' = each line as stored, under its "
        "turn's own header ('[1:56 pm on 8 May, 2023] Caroline: ...'); 'day' = the lines of one day under one "
        "heading ('8 May 2023:'), each without its header (Qwen's tokenizer spends a token on each digit, so "
        "headers take a large share of the evidence tokens: docs/results/2026-12-05-episodic.md). The window is "
        "filled by what is shown, so full-context reads more lines in the same tokens.",
    )
    not_mentioned: str = Field(
        "Not mentioned in the conversation",
        description="The master's answer when the evidence does not hold one (E-mem's adversarial answer).",
    )

    @property
    def lines_per_segment(self) -> int:
        """Most evidence lines one segment yields to the master ('likelihood': after the read path's fusion)."""
        return min(self.shortlist, self.evidence_per_segment)


class AdmissionConfig(Section):
    """Learned write-side admission (MemRouter): ADD/NOOP and content type from turn embeddings, one pass."""

    backbone: str = Field(
        "packaged:SmolLM2-135M-Instruct",
        description="Frozen causal LM the projected turn embeddings run through as inputs_embeds "
        "(MemRouter: a frozen 7B LLM; CPU profile: SmolLM2-135M-Instruct, hidden 576).",
    )
    max_turns: int = Field(
        5, ge=1, le=64, description="Turns per chunk: the current turn plus up to max_turns-1 before it (MemRouter: 5)."
    )
    projector_hidden: int = Field(
        1024, ge=8, le=65_536, description="Width of the projector's hidden layer (not published; chosen here)."
    )
    device: str = Field("cpu", description="torch device of the classifier and its training ('cpu', 'cuda').")
    dtype: Literal["float32", "bfloat16", "int8"] = Field(
        "float32",
        description="Backbone precision when classifying (training always runs float32; projector and heads stay "
        "float32). bfloat16 halves the weights a batch-1 pass reads; int8 = dynamic int8 quantization of the "
        "backbone's linear layers, CPU only (its latency and agreement with float32: "
        "docs/results/2026-12-02-admission.md).",
    )
    weights: str = Field(
        "packaged",
        min_length=1,
        description="Trained projector + heads the service loads: 'packaged' (committed with the code, "
        "inference/admission_heads/) or a folder written by `python -m training.train_admission --out DIR`.",
    )
    threshold: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="p_add at or above which a turn is stored. Unset: the threshold saved with the trained heads "
        "(the held-out F1-best cut), else 0.5. Set it to trade storage for recall: a lower cut stores more turns.",
    )
    mode: Literal["classifier", "store_all", "keyword"] = Field(
        "classifier",
        description="The service's admission: 'classifier' (the trained heads; the service refuses to start without "
        "them), 'store_all' (every turn is admitted; its type comes from the keyword rule) or 'keyword' (a turn is "
        "admitted when it holds at least keyword_min memory keywords: the content-type rules' patterns, no model).",
    )
    keyword_min: int = Field(
        1, ge=1, le=100, description="mode 'keyword': memory keywords a turn must hold to be admitted."
    )
