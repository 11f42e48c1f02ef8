"""Training sets from the store: strategy_sft, strategy_dpo, strategy_kto and replay, with a card.

Each kind is a Hugging Face `DatasetDict` (`train`, `eval`) saved under `<out>/<kind>/`, in the
conversational formats TRL's trainers take directly (prompt = the strategy chat messages over s1,
completion/chosen/rejected = the assistant's z JSON). The split is by time and by merge request:
merge requests are ordered by their first review and the latest `eval_fraction` of them form the
eval split, so the eval set measures the future and no MR sits on both sides. An eval merge request
whose diff a train one also has (the same change pushed again under another MR, a cherry-pick) is
dropped from every eval kind: the gate would otherwise score a model on a change it trained on.
Identical examples are kept once, and an eval example whose prompt also appears in train is dropped.
`<out>/card.json` and `<out>/README.md` say what went in.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel

from agent.store.db import Database
from agent.strategy import strategy_messages
from learning.episodes import Episode, MRKey, episodes_from_rows, group_by_prompt, read_review_rows
from learning.feedback_labels import FeedbackRewardConfig
from reviewers.kernel.errors import TrainingError

if TYPE_CHECKING:
    from datasets import DatasetDict, Features

DatasetKind = Literal["strategy_sft", "strategy_dpo", "strategy_kto", "replay"]
DATASET_KINDS: tuple[DatasetKind, ...] = get_args(DatasetKind)
Split = Literal["train", "eval"]
SPLITS: tuple[Split, ...] = ("train", "eval")
CARD_FILE = "card.json"


@dataclass(frozen=True, slots=True)
class DatasetConfig:
    """How reviews become datasets."""

    reward: FeedbackRewardConfig = field(
        default_factory=FeedbackRewardConfig, metadata={"help": "reward weights and the thresholds of each kind"}
    )
    eval_fraction: float = field(
        default=0.2, metadata={"help": "share of merge requests, the most recent ones, held out for eval"}
    )
    split_at: datetime | None = field(
        default=None, metadata={"help": "explicit cutoff: MRs first reviewed at or after it go to eval"}
    )
    replay_min_labeled: int = field(
        default=1, metadata={"help": "a review enters replay when it has at least this many labeled findings"}
    )


class DatasetCard(BaseModel):
    """What a dataset directory holds; `snapshot_id` names its content in the model registry."""

    built_at: datetime
    since: datetime | None
    first_review_at: datetime | None
    last_review_at: datetime | None
    split_at: datetime | None
    reviews: int
    merge_requests: dict[Split, int]
    labels: dict[str, int]
    counts: dict[str, dict[str, int]]
    dropped: dict[str, int]
    reward: dict[str, Any]
    eval_fraction: float
    snapshot_id: str


# --- features --------------------------------------------------------------------------------------


def _features(kind: DatasetKind) -> Features:
    from datasets import Features, List, Value

    messages = List({"role": Value("string"), "content": Value("string")})
    meta = {"mr": Value("string"), "created_at": Value("string")}
    if kind == "strategy_sft":
        return Features({"prompt": messages, "completion": messages, "reward": Value("float64"), **meta})
    if kind == "strategy_dpo":
        return Features(
            {
                "prompt": messages,
                "chosen": messages,
                "rejected": messages,
                "chosen_reward": Value("float64"),
                "rejected_reward": Value("float64"),
                **meta,
            }
        )
    if kind == "strategy_kto":
        return Features({"prompt": messages, "completion": messages, "label": Value("bool"), **meta})
    finding = {
        "path": Value("string"),
        "line": Value("int64"),
        "category": Value("string"),
        "severity": Value("string"),
        "fingerprint": Value("string"),
        "label": Value("string"),
    }
    return Features(
        {
            "review_id": Value("int64"),
            "project": Value("string"),
            "mr_iid": Value("int64"),
            "head_sha": Value("string"),
            "title": Value("string"),
            "description": Value("string"),
            "diff": Value("string"),
            "files": Value("string"),  # JSON object path → text at head (keys vary per row)
            "config_text": Value("string"),
            "s1": Value("string"),
            "prompt": messages,
            "findings": List(finding),
            **meta,
        }
    )


REQUIRED_COLUMNS: dict[DatasetKind, tuple[str, ...]] = {
    "strategy_sft": ("prompt", "completion"),
    "strategy_dpo": ("prompt", "chosen", "rejected"),
    "strategy_kto": ("prompt", "completion", "label"),
    "replay": ("diff", "files", "findings"),
}


# --- rows (pure) -----------------------------------------------------------------------------------

Row = dict[str, Any]


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _prompt(e: Episode) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in strategy_messages(e.prompt_s1)]


def _meta(e: Episode) -> Row:
    return {"mr": f"{e.mr_key[0]}!{e.mr_key[1]}", "created_at": e.created_at.isoformat()}


def sft_rows(episodes: Iterable[Episode], config: FeedbackRewardConfig) -> list[Row]:
    """Well-received strategies: reward at least `sft_min_reward`."""
    return [
        {"prompt": _prompt(e), "completion": _assistant(e.completion), "reward": e.reward, **_meta(e)}
        for e in episodes
        if e.reward >= config.sft_min_reward
    ]


def kto_rows(episodes: Iterable[Episode], config: FeedbackRewardConfig) -> list[Row]:
    """Unpaired thumbs: clearly good strategies desirable, clearly bad ones undesirable."""
    rows = []
    for e in episodes:
        if e.reward >= config.kto_desirable_min:
            label = True
        elif e.reward <= config.kto_undesirable_max:
            label = False
        else:
            continue
        rows.append({"prompt": _prompt(e), "completion": _assistant(e.completion), "label": label, **_meta(e)})
    return rows


def dpo_rows(episodes: Sequence[Episode], config: FeedbackRewardConfig) -> list[Row]:
    """Every pair of different strategies for one MR state whose rewards differ by the margin."""
    rows = []
    for group in group_by_prompt(episodes).values():
        ordered = sorted(group, key=lambda e: (-e.reward, e.review_id))
        for i, better in enumerate(ordered):
            for worse in ordered[i + 1 :]:
                if better.completion == worse.completion or better.reward - worse.reward < config.dpo_margin:
                    continue
                rows.append(
                    {
                        "prompt": _prompt(better),
                        "chosen": _assistant(better.completion),
                        "rejected": _assistant(worse.completion),
                        "chosen_reward": better.reward,
                        "rejected_reward": worse.reward,
                        **_meta(better),
                    }
                )
    return rows


def replay_rows(episodes: Iterable[Episode], *, min_labeled: int) -> list[Row]:
    """Posted reviews' snapshots with their accepted/rejected findings: the RL and eval environment."""
    rows = []
    for e in episodes:
        if e.is_shadow or e.labeled_count < min_labeled:
            continue
        snap = e.snapshot
        mr = e.mr_key[1]
        rows.append(
            {
                "review_id": e.review_id,
                "project": e.mr_key[0],
                "mr_iid": int(mr) if mr.isdigit() else None,
                "head_sha": snap.get("head_sha"),
                "title": str(snap.get("title") or ""),
                "description": str(snap.get("description") or ""),
                "diff": str(snap.get("diff") or ""),
                "files": json.dumps(snap.get("files") or {}, sort_keys=True, ensure_ascii=False),
                "config_text": snap.get("config_text"),
                # the s1 the strategy model was served (scrubbed, as in the SFT prompt): RL and the gate
                # prompt with it, per-path history line included, not a re-rendering without it
                "s1": e.prompt_s1,
                "prompt": _prompt(e),
                "findings": [
                    {
                        "path": f.path,
                        "line": f.line,
                        "category": f.category,
                        "severity": f.severity,
                        "fingerprint": f.fingerprint,
                        "label": f.label,
                    }
                    for f in e.findings
                    if f.label != "unknown"
                ],
                **_meta(e),
            }
        )
    return rows


# --- split and deduplication (pure) ----------------------------------------------------------------


def split_merge_requests(
    episodes: Iterable[Episode], *, eval_fraction: float, split_at: datetime | None
) -> tuple[dict[MRKey, Split], datetime | None]:
    """Assign each MR to a split by the time of its first review; returns the assignment and cutoff."""
    if not 0.0 <= eval_fraction < 1.0:
        raise TrainingError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    first: dict[MRKey, datetime] = {}
    for e in episodes:
        if e.mr_key not in first or e.created_at < first[e.mr_key]:
            first[e.mr_key] = e.created_at
    ordered = sorted(first, key=lambda k: (first[k], k))
    if split_at is None:
        # at least one MR on each side as soon as there are two; none held out from a single MR
        n_eval = min(max(1, round(eval_fraction * len(ordered))), len(ordered) - 1) if eval_fraction else 0
        split_at = first[ordered[len(ordered) - n_eval]] if n_eval > 0 else None
    assignment: dict[MRKey, Split] = {
        k: "eval" if split_at is not None and first[k] >= split_at else "train" for k in ordered
    }
    return assignment, split_at


def drop_seen_diffs(train: Sequence[Episode], evaluation: Sequence[Episode]) -> tuple[list[Episode], int]:
    """The eval episodes whose diff no train episode has, and how many merge requests were dropped."""
    seen = {_diff(e) for e in train}
    kept = [e for e in evaluation if _diff(e) not in seen]
    return kept, len({e.mr_key for e in evaluation} - {e.mr_key for e in kept})


def _diff(e: Episode) -> str:
    return str(e.snapshot.get("diff") or "").strip()


def _row_key(row: Row, columns: Sequence[str]) -> str:
    return json.dumps([row[c] for c in columns], sort_keys=True, ensure_ascii=False)


def deduplicate(train: list[Row], evaluation: list[Row], columns: Sequence[str]) -> tuple[list[Row], list[Row], int]:
    """Keep the first of identical examples, and drop eval examples whose prompt train already has."""
    kept: dict[Split, list[Row]] = {"train": [], "eval": []}
    dropped = 0
    for split, rows in (("train", train), ("eval", evaluation)):
        seen: set[str] = set()
        for row in rows:
            key = _row_key(row, columns)
            if key in seen:
                dropped += 1
                continue
            seen.add(key)
            kept[split].append(row)  # type: ignore[index]
    if "prompt" in columns:
        train_prompts = {_row_key(r, ["prompt"]) for r in kept["train"]}
        before = len(kept["eval"])
        kept["eval"] = [r for r in kept["eval"] if _row_key(r, ["prompt"]) not in train_prompts]
        dropped += before - len(kept["eval"])
    return kept["train"], kept["eval"], dropped


# --- building and loading --------------------------------------------------------------------------


def _snapshot_id(rows: Mapping[DatasetKind, Mapping[Split, list[Row]]]) -> str:
    digest = hashlib.sha256()
    for kind in DATASET_KINDS:
        for split in SPLITS:
            for row in rows[kind][split]:
                digest.update(json.dumps(row, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def _save(kind: DatasetKind, splits: Mapping[Split, list[Row]], path: Path) -> None:
    from datasets import Dataset, DatasetDict

    features = _features(kind)
    dd = DatasetDict(
        {
            split: Dataset.from_dict({c: [r[c] for r in splits[split]] for c in features}, features=features)
            for split in SPLITS
        }
    )
    # one shard per split: `datasets` cannot load back an empty split saved with zero shards
    dd.save_to_disk(str(path), num_shards={s: 1 for s in SPLITS})


def build_datasets(
    db: Database | str, out_dir: Path, *, since: datetime | None = None, config: DatasetConfig | None = None
) -> DatasetCard:
    """Read reviews, findings and feedback; write every dataset kind and the card under `out_dir`."""
    config = config or DatasetConfig()
    if isinstance(db, str):
        from agent.store.db import open_pool

        with open_pool(db, max_size=1) as pool:
            rows = read_review_rows(pool, since=since)
    else:
        rows = read_review_rows(db, since=since)
    if not rows.reviews:
        when = f" since {since.isoformat()}" if since else ""
        raise TrainingError(f"no finished reviews with a strategy in the database{when}: nothing to build from")
    built = episodes_from_rows(rows, config=config.reward)
    if not built.episodes:
        reasons = ", ".join(f"{n} {why}" for why, n in built.skipped.items())
        raise TrainingError(f"none of the {len(rows.reviews)} reviews can be used ({reasons})")
    assignment, split_at = split_merge_requests(
        built.episodes, eval_fraction=config.eval_fraction, split_at=config.split_at
    )
    by_split: dict[Split, list[Episode]] = {s: [e for e in built.episodes if assignment[e.mr_key] == s] for s in SPLITS}
    dropped: dict[str, int] = {f"skipped: {why}": n for why, n in built.skipped.items()}
    by_split["eval"], leaked = drop_seen_diffs(by_split["train"], by_split["eval"])
    if leaked:
        dropped["eval merge requests whose diff train has"] = leaked
    rows_by_kind: dict[DatasetKind, dict[Split, list[Row]]] = {}
    for kind in DATASET_KINDS:
        per_split = {s: _rows_for(kind, by_split[s], config) for s in SPLITS}
        train, evaluation, n_dropped = deduplicate(per_split["train"], per_split["eval"], _dedup_columns(kind))
        rows_by_kind[kind] = {"train": train, "eval": evaluation}
        if n_dropped:
            dropped[f"{kind}: duplicates"] = n_dropped

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind in DATASET_KINDS:
        target = out_dir / kind
        if target.exists():
            shutil.rmtree(target)
        _save(kind, rows_by_kind[kind], target)
    labels = {"accepted": 0, "rejected": 0, "unknown": 0}
    for e in built.episodes:
        for f in e.findings:
            labels[f.label] += 1
    times = [e.created_at for e in built.episodes]
    card = DatasetCard(
        built_at=datetime.now(UTC),
        since=since,
        first_review_at=min(times),
        last_review_at=max(times),
        split_at=split_at,
        reviews=len(built.episodes),
        merge_requests={s: sum(1 for v in assignment.values() if v == s) for s in SPLITS},
        labels=labels,
        counts={kind: {s: len(rows_by_kind[kind][s]) for s in SPLITS} for kind in DATASET_KINDS},
        dropped=dropped,
        reward=asdict(config.reward),
        eval_fraction=config.eval_fraction,
        snapshot_id=_snapshot_id(rows_by_kind),
    )
    (out_dir / CARD_FILE).write_text(card.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "README.md").write_text(render_card(card), encoding="utf-8")
    return card


def _rows_for(kind: DatasetKind, episodes: Sequence[Episode], config: DatasetConfig) -> list[Row]:
    if kind == "strategy_sft":
        return sft_rows(episodes, config.reward)
    if kind == "strategy_dpo":
        return dpo_rows(episodes, config.reward)
    if kind == "strategy_kto":
        return kto_rows(episodes, config.reward)
    return replay_rows(episodes, min_labeled=config.replay_min_labeled)


def _dedup_columns(kind: DatasetKind) -> tuple[str, ...]:
    return ("review_id",) if kind == "replay" else REQUIRED_COLUMNS[kind]


def render_card(card: DatasetCard) -> str:
    """The dataset card as Markdown: what went in, from when, with which reward settings."""
    lines = [
        "# reviewloop strategy datasets",
        "",
        f"Built {card.built_at:%Y-%m-%d %H:%M} UTC from {card.reviews} reviews "
        f"({card.merge_requests['train']} merge requests in train, {card.merge_requests['eval']} in eval).",
        f"Reviews from {_day(card.first_review_at)} to {_day(card.last_review_at)}"
        + (f", since {_day(card.since)}" if card.since else "")
        + (f"; eval holds MRs first reviewed from {card.split_at.isoformat()} on." if card.split_at else "."),
        f"Snapshot id: `{card.snapshot_id}`.",
        "",
        "| dataset | train | eval |",
        "|---|---:|---:|",
        *(f"| {kind} | {c['train']} | {c['eval']} |" for kind, c in card.counts.items()),
        "",
        "Finding labels: " + ", ".join(f"{k} {v}" for k, v in card.labels.items()) + ".",
        "",
        "Reward settings: " + ", ".join(f"{k}={v}" for k, v in card.reward.items()) + ".",
    ]
    if card.dropped:
        lines += ["", "Left out: " + "; ".join(f"{k} ({v})" for k, v in card.dropped.items()) + "."]
    lines += ["", "Prompts were scrubbed of secret-looking strings before writing."]
    return "\n".join(lines) + "\n"


def _day(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d") if value else "-"


def read_card(dataset_dir: Path) -> DatasetCard:
    path = Path(dataset_dir) / CARD_FILE
    try:
        return DatasetCard.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise TrainingError(f"{dataset_dir} is not a dataset directory: {CARD_FILE} is missing") from exc
    except (OSError, ValueError) as exc:
        raise TrainingError(f"{path} is corrupt: {str(exc).splitlines()[0]}") from exc


def load_dataset(dataset_dir: Path, kind: DatasetKind) -> DatasetDict:
    """One kind's train and eval splits; a missing or damaged directory is one TrainingError line."""
    from datasets import load_from_disk

    dataset_dir = Path(dataset_dir)
    if not dataset_dir.is_dir():
        raise TrainingError(f"dataset directory {dataset_dir} does not exist")
    read_card(dataset_dir)
    path = dataset_dir / kind
    if not path.is_dir():
        raise TrainingError(f"{dataset_dir} has no {kind} dataset; build it with `reviewloop dataset build`")
    try:
        loaded = load_from_disk(str(path))
    except Exception as exc:  # datasets raises FileNotFoundError, ArrowInvalid, JSON and index errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrainingError(f"the {kind} dataset in {dataset_dir} is corrupt: {first}") from exc
    from datasets import DatasetDict

    if not isinstance(loaded, DatasetDict) or any(s not in loaded for s in SPLITS):
        raise TrainingError(f"the {kind} dataset in {dataset_dir} is corrupt: it lacks a train or eval split")
    for split in SPLITS:
        missing = [c for c in REQUIRED_COLUMNS[kind] if c not in loaded[split].column_names]
        if missing:
            raise TrainingError(f"the {kind} dataset in {dataset_dir} is corrupt: {split} lacks {', '.join(missing)}")
    return loaded
