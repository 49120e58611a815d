"""What a run leaves behind: its tracker run, its logged points and its summary.

The first process logs (the only one under the simulated engine). The wandb run is opened
at the start of every segment of a run (resuming the same run id after a restart), and
every point logged so far is kept here and checkpointed: the tracker writes its file about
once a second, so the points of a run killed early may never have reached disk, and a
resumed segment starts by logging all of them again. Only the first process keeps them: the
others log nothing, and a copy in every worker's checkpoint would grow with the run's length
in each of them (32 workers: 31 copies per checkpoint) for no reader.
"""

from __future__ import annotations

from pathlib import Path

import torch

from repro.config import Config, as_dict
from repro.track.naming import run_identity
from repro.track.provenance import environment
from repro.track.wandb_run import Tracker
from repro.train import checkpoint
from repro.workload.workload import Workload


class RunLog:
    def __init__(self, cfg: Config, run_dir: Path, first_process: bool):
        self.cfg, self.run_dir, self.first_process = cfg, run_dir, first_process
        self.run_id: str | None = None
        self.last_point: dict = {}
        self.points: list[dict] = []
        self.tracker: Tracker | None = None

    def open(self, workload: Workload) -> None:
        """Start (or resume) the tracker run and replay the points logged so far. Its config
        is the run's, with the `environment` of this segment (`repro.track.provenance`)."""
        if not self.first_process:
            return
        config = as_dict(self.cfg)
        if self.cfg.tracking.resolved_mode() != "disabled":
            config["environment"] = environment(torch.device(workload.device), workload.arrays)
        who = run_identity(self.cfg)
        stored = self.run_dir / "run_id"
        self.tracker = Tracker(
            self.cfg.tracking,
            run_dir=self.run_dir,
            name=who.name,
            group=who.group,
            job_type=who.job_type,
            config=config,
            run_id=self.run_id
            or (stored.read_text(encoding="utf-8").strip() if stored.exists() else None),
            tags=who.tags,
        )
        self.run_id = self.tracker.run_id
        if self.run_id:
            checkpoint.write_atomic(stored, self.run_id.encode())
        for p in self.points:
            self.tracker.log(p, step=p["step"])

    def log(self, point: dict) -> None:
        self.last_point = point  # every process reads it: has the run reached its target?
        if self.first_process:
            self.points.append(point)
        if self.tracker is not None:
            self.tracker.log(point, step=point["step"])

    def finish(self, summary: dict | None, exit_code: int = 0) -> None:
        """Close the tracker run; with a summary, also write summary.json."""
        if self.tracker is not None:
            if summary is not None and self.tracker.url:
                summary = {**summary, "wandb_url": self.tracker.url}
            if summary is not None:
                self.tracker.set_summary(summary)
            self.tracker.finish(exit_code=exit_code)
        if summary is not None and self.first_process:
            checkpoint.write_checked_json(self.run_dir / "summary.json", summary)

    def state_dict(self) -> dict:
        return {"run_id": self.run_id, "last_point": self.last_point, "points": self.points}

    def load_state_dict(self, state: dict) -> None:
        self.run_id = state["run_id"]
        self.last_point, self.points = state["last_point"], state["points"]
