"""Synthesise replay cases (merge requests with known answers) from real Python packages.

One merge request touches 10–40 files of ONE package: each gets one or two benign edits
(learning/envgen/edits.py); up to three files get a planted defect and up to three others a decoy
(learning/envgen/plants.py). The defect lines are labeled accepted — or rejected where the team
profile would reject that comment — and the decoy lines rejected. The review budget (total reviewer
steps, one file per step) covers only a fraction of the files, so a strategy finds the defects only
by putting their files and the right reviewer first. Packages are split before any merge request is
drawn: the held-out merge requests come from packages no training merge request touches.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from learning.envgen.edits import apply_benign_edits
from learning.envgen.plants import DECOYS, DEFECTS, Plant, PlantRole, PlantTemplate, labeled_line, plant
from learning.envgen.profile import TeamProfile
from learning.envgen.sources import Package, SourceFile
from learning.replay import ENVGEN_VERSION, ReplayCase, ReplayFinding, ReplaySplit
from learning.strata.synthetic import file_diff
from reviewers.kernel.errors import ConfigError, InputError
from reviewers.paths import is_test_path

_TITLES = (
    "{pkg}: helper refresh and logging",
    "Tidy {pkg} internals",
    "{pkg}: small fixes and docs",
    "Follow-up cleanups in {pkg}",
    "{pkg}: new helpers, type hints",
)


@dataclass(frozen=True)
class EnvGenConfig:
    """The shape of a synthesised environment."""

    n: int = field(default=64, metadata={"help": "merge requests in all (train and held-out together)"})
    heldout_fraction: float = field(
        default=0.3, metadata={"help": "share of packages (and so of merge requests) held out for evaluation"}
    )
    min_files: int = field(default=10, metadata={"help": "fewest changed files per merge request"})
    max_files: int = field(default=16, metadata={"help": "most changed files per merge request"})
    max_defects: int = field(default=3, metadata={"help": "planted defects per merge request: 0 to this"})
    max_decoys: int = field(
        default=3, metadata={"help": "false alarms (code the analyzers flag, the team calls safe) per MR: 0 to this"}
    )
    budget_fraction: float = field(
        default=0.3, metadata={"help": "review budget (reviewer steps) as a share of the changed files"}
    )
    n_profiles: int = field(
        default=10, metadata={"help": "seeded team profiles; each merge request is drawn with one of them"}
    )
    seed: int = field(default=0, metadata={"help": "the same seed and source give the same merge requests"})

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ConfigError("need at least 2 merge requests (one per split)")
        if not 0 < self.heldout_fraction < 1:
            raise ConfigError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction}")
        if not 1 <= self.min_files <= self.max_files:
            raise ConfigError("need 1 <= min_files <= max_files")
        if self.max_defects < 0 or self.max_decoys < 0 or self.max_defects + self.max_decoys > self.min_files:
            raise ConfigError("max_defects and max_decoys must be >= 0 and fit in min_files together")
        if not 0 < self.budget_fraction <= 1:
            raise ConfigError(f"budget_fraction must be in (0, 1], got {self.budget_fraction}")


def split_packages(packages: list[Package], config: EnvGenConfig) -> dict[ReplaySplit, list[Package]]:
    """Packages shuffled by the seed; the held-out share (at least one, never all) goes to eval."""
    if len(packages) < 2:
        raise InputError(
            f"need at least 2 packages with {config.min_files}+ usable files to split, found {len(packages)}"
        )
    order = sorted(packages, key=lambda p: p.name)
    random.Random(config.seed).shuffle(order)
    n_eval = min(len(order) - 1, max(1, round(config.heldout_fraction * len(order))))
    return {"eval": order[:n_eval], "train": order[n_eval:]}


def _edit_file(
    source: SourceFile, item: tuple[PlantRole, PlantTemplate] | None, rng: random.Random
) -> tuple[str, Plant | None] | None:
    text, applied = apply_benign_edits(source.text, rng, count=rng.randint(1, 2))
    planted: Plant | None = None
    if item is not None:
        role, template = item
        result = plant(text, template, role, rng)
        if result is None:
            return None
        text, planted = result
    elif not applied:
        return None
    return text, planted


def generate_mr(
    case_id: str, package: Package, config: EnvGenConfig, profile: TeamProfile, rng: random.Random
) -> ReplayCase:
    """One merge request over files of one package, with its labels."""
    count = min(len(package.files), rng.randint(config.min_files, config.max_files))
    candidates = rng.sample(list(package.files), len(package.files))
    n_defects = rng.randint(0, config.max_defects)
    n_decoys = rng.randint(0, config.max_decoys)
    roles: list[tuple[PlantRole, PlantTemplate] | None] = [("defect", rng.choice(DEFECTS)) for _ in range(n_defects)]
    roles += [("decoy", rng.choice(DECOYS)) for _ in range(n_decoys)]
    roles += [None] * (count - len(roles))
    changed: list[tuple[str, str, str]] = []
    plants: list[tuple[str, Plant]] = []
    # Plants first, and never in a test path: a reviewer reads released code there, so every defect
    # is one some plan can find (issue 24 found 7 of 11 in test paths, out of every plan's reach).
    # A file no edit fits is dropped and the next one takes its role, so the count holds where it can.
    for role in roles:
        for index, source in enumerate(candidates):
            if role is not None and is_test_path(source.path):
                continue
            del candidates[index]
            edited = _edit_file(source, role, rng)
            if edited is not None:
                text, planted = edited
                changed.append((source.path, source.text, text))
                if planted is not None:
                    plants.append((source.path, planted))
                break
    rng.shuffle(changed)  # diff order says nothing
    findings = []
    files = {path: new for path, _, new in changed}
    for path, item in plants:
        line = labeled_line(files[path], item)
        category = item.template.category
        if item.role == "defect":
            label = profile.vote(path=path, category=category, kind=item.kind) or "accepted"
        else:
            label = "rejected"
        findings.append(
            ReplayFinding(path=path, line=line, category=category, severity=item.template.severity, label=label,
                          kind=item.kind if item.role == "defect" else f"decoy:{item.kind}")
        )  # fmt: skip
    diff = "".join(file_diff(path, old.splitlines(), new.splitlines()) for path, old, new in changed)
    title = rng.choice(_TITLES).format(pkg=package.name)
    # The description says what every such change says; it names no file (a real one rarely lists
    # where its risky lines are, and issue 24 found the old "Adds small helpers in …" naming them all).
    description = "Docstrings, debug logging, renames, type hints and a few small helpers across the package."
    budget = max(1, round(config.budget_fraction * len(changed)))
    history, rule_votes = profile.past_votes(list(files), rng)
    # s1 is rendered by the environment with serving's one renderer, from these same fields.
    return ReplayCase(
        case_id=case_id, title=title, description=description, diff=diff, files=files,
        findings=findings, package=package.name, review_budget=budget, history=history, rule_votes=rule_votes,
        team=profile.name, envgen_version=ENVGEN_VERSION,
    )  # fmt: skip


def seeded_profiles(config: EnvGenConfig) -> list[TeamProfile]:
    """`n_profiles` teams seeded from the environment's seed."""
    return [TeamProfile.sample(config.seed * 1000 + i) for i in range(config.n_profiles)]


def make_env(
    packages: list[Package], config: EnvGenConfig, profiles: TeamProfile | Sequence[TeamProfile] | None = None
) -> list[ReplayCase]:
    """`n` merge requests, train then eval, each from a package of its own split and drawn with one
    team (one given profile: every MR; None: `seeded_profiles`)."""
    teams = (
        seeded_profiles(config)
        if profiles is None
        else [profiles]
        if isinstance(profiles, TeamProfile)
        else list(profiles)
    )
    if not teams:
        raise ConfigError("need at least one team profile")
    usable = [p for p in packages if len(p.files) >= config.min_files]
    splits = split_packages(usable, config)
    n_eval = max(1, round(config.heldout_fraction * config.n))
    counts: dict[ReplaySplit, int] = {"train": config.n - n_eval, "eval": n_eval}
    rng = random.Random(config.seed)
    cases: list[ReplayCase] = []
    order: tuple[ReplaySplit, ...] = ("train", "eval")
    for split in order:
        pool = splits[split]
        for i in range(counts[split]):
            package = pool[i % len(pool)] if i < len(pool) else rng.choice(pool)
            team = teams[rng.randrange(len(teams))]
            case = generate_mr(f"envgen-{config.seed}-{split}-{i:04d}", package, config, team, rng)
            cases.append(case.model_copy(update={"split": split}))
    return cases
