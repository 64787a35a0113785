"""The headline tables, generated from the committed answer files (no model, no Ray): never copied by hand.

    python -m bench.headline            # print the tables
    python -m bench.headline --write    # rewrite docs/results/headline.md and the README's table
    python -m bench.headline --check    # exit 1 when either differs from what would be written

Every ``<system>-<key>.jsonl`` and ``admission-<system>-<policy>-<key>.jsonl`` under ``--answers-dir`` (default
``bench/answers``) is scored with the official LoCoMo scorer (``bench.locomo.score_row`` and ``summarise``, as
``bench.locomo_report`` does). The rows do not say how they were asked: the profile and the question-kind mode of a
file come from the command named beside it in ``<answers-dir>/README.md`` (``--profile``; ``--category``, whose
default in ``bench.locomo`` and ``bench.admission_downstream`` is ``predicted``). A file that README does not list
has an unknown profile and mode and is shown, but never counted in the headline.

Headline rows are the ``predicted``-kind files (the service's behaviour: ``/v1/ask`` without a kind hint), one row
per (system, profile): categories 1–4 from the file of that system and profile with the most category 1–4
questions, category 5 apart from the one with the most category-5 questions (ties: the later row of the README
table). The admission table is ``bench.admission_downstream``'s files, with ``store_all`` read from the plain
system's file (both read every turn, so they share it). Tiers, the admission classifier's own precision/recall and
the service's latency have no committed result; the page names the commands that measure them.

The README holds the small table between ``<!-- headline:start -->`` and ``<!-- headline:end -->``. The last stdout
line is a JSON object (``{"answers_dir", "files", "locomo": [...], "admission": [...], "written", "stale"}``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.locomo_report import CATEGORY_NAMES, fmt
from core.config import REPO_ROOT

START, END = "<!-- headline:start -->", "<!-- headline:end -->"
DEFAULT_CATEGORY_MODE = "predicted"  # bench.locomo's and bench.admission_downstream's --category default
HEADLINE_MODE = "predicted"
MAIN_CATEGORIES = (1, 2, 3, 4)
ADVERSARIAL = 5
SPLIT = "test"  # bench/answers holds test-split runs only (its README)
COMMAND = "python -m bench.headline --write"
SYSTEM_ORDER = ("engram", "direct_read", "rag", "full_context")
NOT_MEASURED = (
    ("tiers (HTM-EAR saturation: MRR, essential lost, latency)", "python -m bench.tiers --scenario B"),
    ("admission classifier: precision, recall, latency against generative admission",
     "python -m bench.admission --split test"),
    ("service latency over HTTP (ingest, search, ask)",
     "bin/loopback-only python -m bench.cluster --conversations 2 --concurrency 1,8"),
)
ADMISSION_HEADS = Path("inference/admission_heads/admission.json")


@dataclass
class AnswerFile:
    """One answers file, scored: ``main`` over categories 1–4 and ``adversarial`` over category 5 (None: no rows)."""

    path: Path
    system: str
    policy: str | None  # an admission policy (bench.admission_downstream), None for bench.locomo's files
    command: str | None  # from the answers README; None: not listed there
    profile: str | None
    mode: str | None
    order: int  # row of the answers README (files it does not list come last)
    main: dict | None = None
    adversarial: dict | None = None
    ingest_s: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name


# -- reading ---------------------------------------------------------------------------------
def readme_commands(answers_dir: Path) -> list[tuple[str, str]]:
    """(file name, command) of each row of ``<answers_dir>/README.md``'s table, in its order."""
    readme = answers_dir / "README.md"
    if not readme.is_file():
        return []
    out = []
    for line in readme.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) >= 2:
            name, command = re.match(r"`([^`]+)`", cells[0]), re.match(r"`([^`]+)`", cells[1])
            if name and command:
                out.append((name.group(1), command.group(1)))
    return out


def _flag(command: str, flag: str) -> str | None:
    found = re.search(rf"(?:^|\s){re.escape(flag)}[\s=](\S+)", command)
    return found.group(1) if found else None


def _names(path: Path) -> tuple[str, str | None]:
    """(system, policy) from a cache file's name: ``rag-<key>`` or ``admission-rag-keyword_rule-<key>``."""
    stem = path.stem.rsplit("-", 1)[0]
    if stem.startswith("admission-"):
        system, _, policy = stem.removeprefix("admission-").partition("-")
        return system, policy
    return stem, None


def load_file(path: Path, command: str | None, order: int) -> AnswerFile:
    from bench import locomo

    system, policy = _names(path)
    cache = locomo.ResultCache(path)
    rows = [locomo.score_row(r) for r in cache.questions.values()]
    for r in rows:
        if r["system"] != system:
            raise ValueError(f"{path}: a row of system {r['system']!r} in a file named for {system!r}")
    mode = None if command is None else (_flag(command, "--category") or DEFAULT_CATEGORY_MODE)
    profile = None if command is None else (_flag(command, "--profile") or "default")
    out = AnswerFile(path, system, policy, command, profile, mode, order,
                     ingest_s=[float(r["seconds"]) for r in cache.ingests.values()])
    main = [r for r in rows if int(r["category"]) in MAIN_CATEGORIES]
    adv = [r for r in rows if int(r["category"]) == ADVERSARIAL]
    out.main = locomo.summarise(main, split_name=SPLIT, system=system) if main else None
    out.adversarial = locomo.summarise(adv, split_name=SPLIT, system=system) if adv else None
    return out


def load_files(answers_dir: Path) -> list[AnswerFile]:
    listed = readme_commands(answers_dir)
    order = {name: i for i, (name, _) in enumerate(listed)}
    commands = dict(listed)
    paths = sorted(answers_dir.glob("*.jsonl"))
    return [load_file(p, commands.get(p.name), order.get(p.name, len(listed))) for p in paths]


# -- choosing the headline rows --------------------------------------------------------------
def _best(files: Sequence[AnswerFile], part: str) -> AnswerFile | None:
    """The file with the most questions in ``part`` (``main`` or ``adversarial``); ties: the later README row."""
    have = [f for f in files if getattr(f, part) is not None]
    return max(have, key=lambda f: (getattr(f, part)["questions"], f.order)) if have else None


def _system_rank(system: str) -> tuple[int, str]:
    return (SYSTEM_ORDER.index(system) if system in SYSTEM_ORDER else len(SYSTEM_ORDER), system)


def headline_rows(files: Sequence[AnswerFile]) -> list[dict]:
    """One row per (system, profile) of the plain systems' predicted-kind files."""
    groups: dict[tuple[str, str], list[AnswerFile]] = {}
    for f in files:
        if f.policy is None and f.mode == HEADLINE_MODE:
            groups.setdefault((f.system, f.profile), []).append(f)
    rows = []
    for (system, profile), group in sorted(groups.items(), key=lambda kv: (kv[0][1], _system_rank(kv[0][0]))):
        main, adv = _best(group, "main"), _best(group, "adversarial")
        rows.append({"system": system, "profile": profile, "mode": HEADLINE_MODE,
                     "main": main.main if main else None, "main_file": main.name if main else None,
                     "adversarial": adv.adversarial if adv else None, "adversarial_file": adv.name if adv else None,
                     "ingest_s": main.ingest_s if main else []})
    return rows


def admission_rows(files: Sequence[AnswerFile], headline: Sequence[dict]) -> list[dict]:
    """One row per (system, profile, mode, policy) of bench.admission_downstream's files, with store_all."""
    groups: dict[tuple[str, str | None, str | None, str], list[AnswerFile]] = {}
    for f in files:
        if f.policy is not None:
            groups.setdefault((f.system, f.profile, f.mode, f.policy), []).append(f)
    rows = []
    for system, profile, mode in sorted({k[:3] for k in groups}, key=lambda k: tuple(map(str, k))):
        plain = next((h for h in headline if (h["system"], h["profile"], h["mode"]) == (system, profile, mode)
                      and h["main"] is not None), None)
        if plain is not None:
            rows.append({"system": system, "profile": profile, "mode": mode, "policy": "store_all",
                         "main": plain["main"], "file": plain["main_file"]})
        for key in sorted(k for k in groups if k[:3] == (system, profile, mode)):
            best = _best(groups[key], "main")
            if best is not None:
                rows.append({"system": system, "profile": profile, "mode": mode, "policy": key[3],
                             "main": best.main, "file": best.name})
    return rows


# -- markdown --------------------------------------------------------------------------------
def _f1(summary: dict | None, key: str = "overall") -> str:
    return "–" if summary is None else fmt(summary["f1"][key])


def _n(summary: dict | None) -> str:
    return "0" if summary is None else str(summary["questions"])


def _ms(summary: dict | None, key: str) -> str:
    return "–" if summary is None else fmt(summary[key], 0)


def _display(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _command(command: str) -> str:
    """The answers README's command; its bench.locomo rows give the flags alone."""
    return command if command.startswith("bench.") else f"bench.locomo {command}"


def readme_table(headline: Sequence[dict]) -> str:
    """The README's small table: one row per system and profile, F1 over categories 1–4 and category 5 apart."""
    lines = ["| system | profile | F1, categories 1–4 (questions) | F1, category 5 (questions) |", "|---|---|---|---|"]
    for h in headline:
        lines.append(f"| {h['system']} | {h['profile']} | {_f1(h['main'])} ({_n(h['main'])}) | "
                     f"{_f1(h['adversarial'])} ({_n(h['adversarial'])}) |")
    return "\n".join(lines)


def readme_block(headline: Sequence[dict], answers_dir: Path) -> str:
    return "\n".join([
        START,
        f"LoCoMo {SPLIT} split, official F1, question kind predicted. Generated by `{COMMAND}` from "
        f"`{_display(answers_dir)}/`; do not edit by hand.",
        "",
        readme_table(headline),
        END,
    ])


def page(files: Sequence[AnswerFile], headline: Sequence[dict], admission: Sequence[dict], answers_dir: Path) -> str:
    where = _display(answers_dir)
    cats = " | ".join(f"F1 {c} {CATEGORY_NAMES[c]}" for c in MAIN_CATEGORIES)
    out = [
        "# Headline results",
        "",
        f"Generated by `{COMMAND}` (`python -m bench.headline --check` fails when this page or the README's table "
        f"is stale) from the committed answer files under `{where}/` listed at the end, and from the commands "
        f"beside them in `{where}/README.md`; do not edit by hand. Scores: the official LoCoMo scorer "
        "(`bench.locomo_score`, micro average), computed from the rows' predictions; latencies were measured when "
        "each answer was written (the answers README says on which machine and when).",
        "",
        "## LoCoMo per system and profile",
        "",
        f"{SPLIT.capitalize()} split, question kind `{HEADLINE_MODE}` (the master reads the kind from the question, "
        "as `/v1/ask` without a hint). Categories 1–4 from the system's file with the most of them, category 5 "
        "apart (its F1 is 1 only for an abstention).",
        "",
        f"| system | profile | {cats} | F1 1–4 | questions 1–4 | F1 5 adversarial | questions 5 | files |",
        "|---|---|" + "---|" * (len(MAIN_CATEGORIES) + 5),
    ]
    for h in headline:
        used = sorted({n for n in (h["main_file"], h["adversarial_file"]) if n})
        out.append("| " + " | ".join([
            h["system"], h["profile"], *(_f1(h["main"], str(c)) for c in MAIN_CATEGORIES), _f1(h["main"]),
            _n(h["main"]), _f1(h["adversarial"]), _n(h["adversarial"]), ", ".join(f"`{n}`" for n in used),
        ]) + " |")
    out += ["", "## Admission downstream", ""]
    if admission:
        out += [
            "`bench.admission_downstream`: only the turns a policy admits are stored, then the same questions are "
            "answered (categories 1–4). `store_all` is the plain system's file.",
            "",
            "| policy | system | profile | question kind | F1 1–4 | questions | file |",
            "|---|---|---|---|---|---|---|",
        ]
        for a in admission:
            out.append(f"| {a['policy']} | {a['system']} | {a['profile']} | {a['mode']} | {_f1(a['main'])} | "
                       f"{_n(a['main'])} | `{a['file']}` |")
    else:
        out.append(f"No `admission-*.jsonl` file under `{where}/`.")
    heads = REPO_ROOT / ADMISSION_HEADS
    if heads.is_file():
        meta = json.loads(heads.read_text(encoding="utf-8"))
        if meta.get("holdout_f1") is not None:
            out += ["", f"The committed classifier heads' ADD/NOOP F1 on their held-out conversation "
                    f"({meta.get('holdout_conversation', '?')}), as training measured it: "
                    f"{fmt(float(meta['holdout_f1']))} (`{ADMISSION_HEADS}`, `holdout_f1`)."]
    out += [
        "", "## Latency per question", "",
        "Each `ask` as the benchmark timed it (categories 1–4 of the headline file), and the mean ingest time of a "
        "conversation from the same file's `ingest` rows.",
        "",
        "| system | profile | ask p50 ms | ask p95 ms | ingest s per conversation |",
        "|---|---|---|---|---|",
    ]
    for h in headline:
        ingest = fmt(sum(h["ingest_s"]) / len(h["ingest_s"]), 1) if h["ingest_s"] else "–"
        out.append(f"| {h['system']} | {h['profile']} | {_ms(h['main'], 'latency_p50_ms')} | "
                   f"{_ms(h['main'], 'latency_p95_ms')} | {ingest} |")
    out += [
        "", "## Not in a committed result yet", "",
        "No committed file holds these; each command measures them and writes its tables under `results/` "
        "(not committed):",
        "",
        "| what | command |",
        "|---|---|",
        *(f"| {what} | `{cmd}` |" for what, cmd in NOT_MEASURED),
        "", "## The files", "",
        f"Every `*.jsonl` under `{where}/`; profile and question kind from the command in its README "
        "(`?`: not listed there; a `bench.locomo` command there names the flags beyond "
        f"`--split test --categories 1,2,3,4 --answers-dir {where}`). `--category` absent means "
        f"`{DEFAULT_CATEGORY_MODE}`.",
        "",
        "| file | system | policy | profile | question kind | command | F1 1–4 | questions 1–4 | F1 5 "
        "| questions 5 | in the headline |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    used = {n for h in headline for n in (h["main_file"], h["adversarial_file"]) if n}
    used |= {a["file"] for a in admission}
    for f in files:
        if f.mode is None:
            state = "no (not in the answers README)"
        elif f.mode != HEADLINE_MODE:
            state = f"no ({f.mode} kinds)"
        else:
            state = "yes" if f.name in used else "no (superseded)"
        out.append("| " + " | ".join([
            f"`{f.name}`", f.system, f.policy or "–", f.profile or "?", f.mode or "?",
            f"`{_command(f.command)}`" if f.command else "?", _f1(f.main), _n(f.main), _f1(f.adversarial),
            _n(f.adversarial), state,
        ]) + " |")
    return "\n".join(out) + "\n"


def replace_block(text: str, block: str, where: str) -> str:
    """``text`` with its marked block replaced by ``block``; ValueError without one pair of markers."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"{where}: needs one {START} ... {END} pair")
    return text[:text.index(START)] + block + text[text.index(END) + len(END):]


# -- command line ----------------------------------------------------------------------------
def _summary_json(s: dict | None) -> dict | None:
    return None if s is None else {"questions": s["questions"], "f1": s["f1"], "latency_p50_ms": s["latency_p50_ms"],
                                   "latency_p95_ms": s["latency_p95_ms"]}


def main(argv: list[str] | None = None) -> dict:
    from bench.common import emit_json

    parser = argparse.ArgumentParser(prog="python -m bench.headline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers-dir", type=Path, default=REPO_ROOT / "bench" / "answers",
                        help="the committed answer files and their README (default bench/answers)")
    parser.add_argument("--readme", type=Path, default=REPO_ROOT / "README.md", help="README holding the markers")
    parser.add_argument("--page", type=Path, default=REPO_ROOT / "docs" / "results" / "headline.md",
                        help="the generated page (default docs/results/headline.md)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the page and the README's marked table")
    mode.add_argument("--check", action="store_true", help="exit 1 when the page or the README's table is stale")
    args = parser.parse_args(argv)
    if not args.answers_dir.is_dir():
        parser.error(f"no answers folder at {args.answers_dir}")

    print(f"scoring {args.answers_dir}", file=sys.stderr, flush=True)
    files = load_files(args.answers_dir)
    headline = headline_rows(files)
    admission = admission_rows(files, headline)
    new_page = page(files, headline, admission, args.answers_dir)
    block = readme_block(headline, args.answers_dir)
    print(new_page, flush=True)

    written, stale = [], []
    if args.write or args.check:
        old_readme = args.readme.read_text(encoding="utf-8") if args.readme.is_file() else ""
        try:
            new_readme = replace_block(old_readme, block, str(args.readme))
        except ValueError as err:
            parser.error(str(err))
        old_page = args.page.read_text(encoding="utf-8") if args.page.is_file() else ""
        for path, old, new in ((args.page, old_page, new_page), (args.readme, old_readme, new_readme)):
            if old == new:
                continue
            if args.write:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(new, encoding="utf-8")
                written.append(str(path))
            else:
                stale.append(str(path))
                sys.stderr.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                           f"{path} (committed)", f"{path} (generated)"))
        for path in stale:
            print(f"stale: {path}; run `{COMMAND}`", file=sys.stderr, flush=True)

    out = {
        "answers_dir": _display(args.answers_dir), "files": [f.name for f in files],
        "locomo": [{"system": h["system"], "profile": h["profile"], "mode": h["mode"],
                    "categories_1_4": _summary_json(h["main"]), "category_5": _summary_json(h["adversarial"]),
                    "files": sorted({n for n in (h["main_file"], h["adversarial_file"]) if n})} for h in headline],
        "admission": [{"system": a["system"], "profile": a["profile"], "mode": a["mode"], "policy": a["policy"],
                       "categories_1_4": _summary_json(a["main"]), "file": a["file"]} for a in admission],
        "written": written, "stale": stale,
    }
    emit_json(out)
    if stale:
        raise SystemExit(1)
    return out


if __name__ == "__main__":
    main()
