"""Structured logs: every line is JSON and carries the merge request it concerns, in threads too."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from api.logs import ContextFilter, JsonFormatter, log_context


def test_context_reaches_every_line_including_worker_threads() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("reviewloop.test.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    async def main() -> None:
        with log_context(project="grp/app", mr_iid=12, head_sha="abc"):
            logger.info("outer", extra={"status": "queued"})
            await asyncio.to_thread(logger.info, "in a thread")
            with log_context(event_id=5):
                logger.warning("nested")
        logger.info("after")

    try:
        asyncio.run(main())
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["outer", "in a thread", "nested", "after"]
    for line in lines[:3]:
        assert (line["project"], line["mr_iid"], line["head_sha"]) == ("grp/app", 12, "abc")
    assert lines[0]["status"] == "queued" and lines[0]["level"] == "info"
    assert lines[2]["event_id"] == 5 and lines[1]["event_id"] is None
    assert (lines[3]["project"], lines[3]["mr_iid"], lines[3]["head_sha"]) == (None, None, None)
