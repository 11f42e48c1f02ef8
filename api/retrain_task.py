"""Retraining from the settings: what `reviewloop retrain` and the worker's periodic job both run.

The periodic job is a procrastinate periodic task, registered only when `REVIEWLOOP_RETRAIN_CRON`
is set (off by default: the Kubernetes CronJob usually runs it instead). It runs on the maintenance
queue with a queueing lock, so at most one is ever waiting; and the pipeline's own advisory lock
refuses a retrain while another (the CronJob's, an operator's) is running, which the job logs and
counts as done rather than as a failure to retry.

Nothing here imports torch or the trainers at import time: the API process imports the worker's
tasks to defer jobs and must stay small.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import procrastinate

from agent.service_settings import Settings
from reviewers.kernel.errors import ConfigError, TrainingError

if TYPE_CHECKING:
    from learning.retrain import RetrainReport
    from learning.retrain_config import RetrainConfig

logger = logging.getLogger(__name__)

RETRAIN_TASK = "retrain_strategy_model"
RETRAIN_QUEUE = "maintenance"
RETRAIN_DIR = "retrain"  # under the data directory: the shared models volume in deploy/


def download_base_model(model_id: str) -> Path:
    """A hub model id as a local directory (the Hugging Face cache: HF_HOME, HF_TOKEN for gated models)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=model_id))
    except Exception as exc:  # the hub client raises many types (offline, gated, not found, HTTP)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"cannot fetch base model {model_id!r}: {first}") from exc


def retrain_config_from(
    settings: Settings, *, base_model: Path | None, work_dir: Path | None, config_file: Path | None
) -> RetrainConfig:
    """The retrain config: the command's options, then the config file, then the settings.

    The base model is `--base-model`, else the file's `base_model`, else REVIEWLOOP_LLM_MODEL_PATH,
    else REVIEWLOOP_LLM_MODEL (the model vLLM serves) fetched into the Hugging Face cache.
    """
    from learning.retrain_config import load_retrain_config

    config = load_retrain_config(config_file, base_model=base_model, work_dir=work_dir)
    if config.base_model is None:
        if settings.llm_model_path is not None:
            config.base_model = settings.llm_model_path
        elif settings.llm_model:
            config.base_model = download_base_model(settings.llm_model)
        else:
            raise ConfigError(
                "no base model to train: pass --base-model, set base_model in --config, or set"
                " REVIEWLOOP_LLM_MODEL_PATH (or REVIEWLOOP_LLM_MODEL, fetched from the hub)"
            )
    if work_dir is None and (config_file is None or "work_dir" not in _file_keys(config_file)):
        config.work_dir = settings.data_dir / RETRAIN_DIR
    return config


def _file_keys(path: Path) -> set[str]:
    from learning.retrain_config import read_config_file

    return set(read_config_file(path))


def run_retrain(
    settings: Settings,
    *,
    base_model: Path | None = None,
    work_dir: Path | None = None,
    config_file: Path | None = None,
) -> RetrainReport:
    """One retrain against the configured store; promotions go to vLLM when it serves the model."""
    from agent.store.db import connect_store
    from learning.retrain import VllmServer, retrain

    config = retrain_config_from(settings, base_model=base_model, work_dir=work_dir, config_file=config_file)
    vllm = (
        VllmServer(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        )
        if settings.llm_base_url
        else None
    )
    pool = connect_store(database_url=settings.database_url, data_dir=settings.data_dir, pool_size=2)
    try:
        return retrain(pool, config, vllm=vllm)
    finally:
        pool.close()


def run_scheduled_retrain(settings: Settings) -> str:
    """The periodic job's body: a retrain, where "another one is running" is an outcome, not an error."""
    from learning.retrain import RetrainBusyError

    try:
        report = run_retrain(settings)
    except RetrainBusyError as exc:
        logger.warning("scheduled retrain skipped", extra={"reason": str(exc)})
        return f"skipped: {exc}"
    summary = f"retrain run {report.run_id} {report.status}: decision {report.decision}, promoted {report.promoted}"
    logger.info("scheduled retrain finished", extra={"run_id": report.run_id, "status": report.status})
    if report.status == "failed":
        raise TrainingError(f"retrain run {report.run_id} failed: {report.reason}")
    return summary


def check_cron(cron: str) -> str:
    """A cron expression procrastinate accepts (5 fields, or 6 with seconds); else one clear line."""
    from croniter import croniter

    if not croniter.is_valid(cron):
        raise ConfigError(f"REVIEWLOOP_RETRAIN_CRON {cron!r} is not a cron expression (e.g. '0 3 * * 0')")
    return cron


def register_retrain_task(app: procrastinate.App, *, cron: str | None, settings: Settings | None = None) -> bool:
    """Add the periodic retrain to a queue app when `cron` is set; returns whether it was added.

    `settings` are read again at each run when not given, so the job sees the worker's environment.
    """
    if not cron:
        return False
    check_cron(cron)

    @app.periodic(cron=cron, periodic_id=RETRAIN_TASK)
    @app.task(name=RETRAIN_TASK, queue=RETRAIN_QUEUE, queueing_lock=RETRAIN_TASK)
    async def retrain_strategy_model(timestamp: int) -> str:
        del timestamp  # procrastinate passes the scheduled time; the pipeline reads all data up to now
        return await asyncio.to_thread(run_scheduled_retrain, settings or Settings())

    return True
