"""The training loop every method shares. It knows no method by name.

Per step: batch -> forward/backward -> strategy.after_backward (gradient communication)
-> optimizer.step -> strategy.after_step (model/delta communication) -> modeled clock
(compute time, then each CommRecord as a barrier) -> running metrics. Every
`trainer.eval_every` steps it evaluates the worker-averaged model and logs one point;
every `trainer.checkpoint_every` steps every rank checkpoints its whole state.
"""

from __future__ import annotations

import copy
import math
import time

import torch
from tqdm import tqdm

from repro.config import Config, as_dict, config_hash, run_dir_of
from repro.dist.collectives import Collectives, CommRecord
from repro.errors import UserError
from repro.netmodel.clock import ModeledClock
from repro.netmodel.compute import ComputeModel
from repro.netmodel.schedule import NetworkSchedule
from repro.strategies.base import StepInfo, build_strategy
from repro.track.wandb_run import Tracker
from repro.train import checkpoint
from repro.train.evaluate import averaged_model, rng_state, seed_rank_rngs, set_rng_state
from repro.train.metrics import RunningStats, point
from repro.train.optim import build_optimizer, lr_at, set_lr
from repro.workload.data import ShardSampler
from repro.workload.workload import Workload, prepare


class Diverged(UserError):
    """The training loss became NaN or infinite."""


class Trainer:
    def __init__(self, cfg: Config, comm: Collectives, device: str):
        self.cfg, self.comm, self.device = cfg, comm, device
        self.rank, self.world = comm.rank, comm.world_size
        self.run_dir = run_dir_of(cfg)
        self.hash = config_hash(cfg)
        tc = cfg.trainer
        self.workload = Workload(cfg.workload, prepare(cfg.workload, cfg.data, cfg.seed), device)
        torch.manual_seed(cfg.seed)  # identical initial model on every rank
        self.model = self.workload.model_factory().to(device)
        self.optimizer = build_optimizer(cfg.optim, self.model.parameters())
        self.strategy = build_strategy(cfg.method, self.world)
        self.strategy.setup(self.model, self.optimizer, comm)
        self.probe_compute_s, self.probe_steps = 0.0, 0
        if hasattr(self.strategy, "set_probe"):
            self.strategy.set_probe(self.probe)
        self.n_train = self.workload.arrays.n_train
        self.sampler = ShardSampler(self.n_train, self.world, self.rank, tc.batch_size, cfg.seed)
        seed_rank_rngs(cfg.seed * 1009 + self.rank + 1, self.workload.aug_gen)
        self.schedule = NetworkSchedule.from_config(cfg.network)
        self.compute = ComputeModel(cfg.compute, self.world, cfg.seed)
        self.clock = ModeledClock(self.world, bytes_scale=cfg.network.bytes_scale)
        self.stats = RunningStats()
        self.pending_compute_s = 0.0
        self.wall_offset_s = 0.0
        self.run_id: str | None = None
        self.last_point: dict = {}
        self.logged_points: list[dict] = []

    # ---------------------------------------------------------------- the loop
    def run(self) -> dict | None:
        start = self.restore()
        tracker = self._tracker()
        if tracker is not None:
            # The tracker writes its file about once a second, so the points of a run killed
            # early may never have reached disk. The checkpoint keeps every point logged so
            # far (a few hundred small dicts), and the resumed segment starts with all of them.
            for p in self.logged_points:
                tracker.log(p, step=p["step"])
        try:
            self.loop(start, tracker)
            return self.finish(tracker)
        except BaseException:
            if tracker is not None:
                tracker.finish(exit_code=1)
            raise

    def loop(self, start: int, tracker: Tracker | None) -> None:
        self.t0 = time.perf_counter() - self.wall_offset_s
        steps, budget = self.cfg.trainer.steps, self.cfg.trainer.time_budget_s
        # With a modeled-time budget the bar counts modeled seconds, else steps.
        by_time = budget > 0
        bar = tqdm(
            total=round(budget, 1) if by_time else steps,
            initial=round(min(self.clock.now(), budget), 1) if by_time else start,
            desc=self.cfg.label,
            unit="s" if by_time else "step",
            disable=self.rank != 0 or not self.cfg.trainer.progress,
            dynamic_ncols=True,
        )
        for step in range(start + 1, steps + 1):
            self.train_step(step)
            bar.update(round(min(self.clock.now(), budget), 1) - bar.n if by_time else 1)
            out_of_time = budget > 0 and self.clock.now() >= budget
            if step % self.cfg.trainer.eval_every == 0 or step == steps or out_of_time:
                self.log_point(step, tracker)
                bar.set_postfix(
                    step=step,
                    loss=f"{self.last_point['train/loss']:.4f}",
                    acc=f"{self.last_point['test/acc']:.3f}",
                )
            if out_of_time or self.reached_target():
                break
            if step % self.cfg.trainer.checkpoint_every == 0 and step < steps:
                self.save(step)
        bar.close()

    def reached_target(self) -> bool:
        target = self.cfg.trainer.target_acc
        return target > 0 and self.last_point.get("test/acc", 0.0) >= target

    def train_step(self, step: int) -> None:
        tc = self.cfg.trainer
        x, y = self.workload.batch(self.sampler.next_indices())
        epoch = step * tc.batch_size * self.world / self.n_train
        lr = lr_at(self.cfg.optim, step, epoch)
        set_lr(self.optimizer, lr)
        link = self.schedule.link_at(epoch)

        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=False)
        loss_t = self.workload.loss(self.model(x), y)
        loss_t.backward()
        compute_s = time.perf_counter() - started
        loss = loss_t.item()
        if not math.isfinite(loss):
            raise Diverged(f"training diverged at step {step} (loss={loss}); lower optim.lr")

        # clock.now() is identical on every rank, so strategies that decide from time agree
        info = StepInfo(step, epoch, loss, lr, self.clock.now(), link)
        records = self.strategy.after_backward(info)
        started = time.perf_counter()
        self.optimizer.step()
        compute_s += time.perf_counter() - started
        records += self.strategy.after_step(info)

        self.advance_clock(step, compute_s, records, link)
        self.stats.add_step(loss, records)

    def advance_clock(self, step: int, compute_s: float, records: list[CommRecord], link) -> None:
        """Sampled compute times are known to every rank; measured ones are exchanged at
        barriers only, so workers between synchronisations never wait for the clock.
        Probe steps a strategy ran inside this step are charged as compute too."""
        if self.cfg.compute.mode == "sampled":
            self.clock.advance_compute(self.compute.times(step) * (1 + self.probe_steps))
        else:
            self.pending_compute_s += compute_s + self.probe_compute_s
        self.probe_compute_s, self.probe_steps = 0.0, 0
        if self.cfg.compute.mode != "sampled" and records:
            self.flush_measured_compute()
        self.clock.charge(records, link)
        if self.cfg.network.inject:
            lag = self.clock.worker(self.rank) - (time.perf_counter() - self.t0)
            if lag > 0:
                time.sleep(lag)

    def flush_measured_compute(self) -> None:
        if self.cfg.compute.mode == "sampled":
            return
        pending = torch.tensor([self.pending_compute_s], dtype=torch.float64)
        times = self.comm.allgather_untracked(pending).view(-1).numpy()
        self.clock.advance_compute(times)
        self.pending_compute_s = 0.0

    def probe(self, n_steps: int, per_step) -> None:
        """Run `n_steps` trial steps from a snapshot, then restore it exactly (model,
        optimizer, data position, every RNG): used by Top-k's compression-ratio probing, so
        probing costs time but never changes the training trajectory."""
        snap = (
            copy.deepcopy(self.model.state_dict()),
            copy.deepcopy(self.optimizer.state_dict()),
            self.sampler.state_dict(),
            rng_state(self.workload.aug_gen),
        )
        for i in range(n_steps):
            x, y = self.workload.batch(self.sampler.next_indices())
            started = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=False)
            self.workload.loss(self.model(x), y).backward()
            self.probe_compute_s += time.perf_counter() - started
            per_step(i)
            started = time.perf_counter()
            self.optimizer.step()
            self.probe_compute_s += time.perf_counter() - started
            self.probe_steps += 1
        self.model.load_state_dict(snap[0])
        self.optimizer.load_state_dict(snap[1])
        self.sampler.load_state_dict(snap[2])
        set_rng_state(snap[3], self.workload.aug_gen)

    # ------------------------------------------------------------- log points
    def log_point(self, step: int, tracker: Tracker | None) -> None:
        self.flush_measured_compute()
        loss = torch.tensor([self.stats.loss_sum, self.stats.loss_count], dtype=torch.float64)
        self.comm.allreduce_untracked(loss)
        model = averaged_model(self.model, self.comm)
        sums = self.workload.evaluate_shard(model, self.rank, self.world)
        self.comm.allreduce_untracked(sums)
        wall_s = time.perf_counter() - self.t0
        samples = step * self.cfg.trainer.batch_size * self.world
        self.last_point = point(
            step=step,
            epoch=samples / self.n_train,
            samples=samples,
            train_loss=(loss[0] / loss[1]).item(),
            test=((sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()),
            stats=self.stats,
            wall_s=wall_s,
            modeled_s=self.clock.now(),
            lr=self.optimizer.param_groups[0]["lr"],
            strategy_metrics=self.strategy.metrics(),
        )
        self.stats.reset_interval(wall_s, samples, self.clock.now())
        self.logged_points.append(self.last_point)
        if tracker is not None:
            tracker.log(self.last_point, step=step)

    # ------------------------------------------------------- checkpoint/resume
    def _tracker(self) -> Tracker | None:
        if self.rank != 0:
            return None
        e = self.cfg.experiment
        tracker = Tracker(
            self.cfg.tracking,
            run_dir=self.run_dir,
            name=self.cfg.label,
            group=e.group or e.name,
            job_type=self.cfg.label,
            config=as_dict(self.cfg),
            run_id=self.run_id or self._stored_run_id(),
        )
        self.run_id = tracker.run_id
        if self.run_id:
            checkpoint.write_atomic(self.run_dir / "run_id", self.run_id.encode())
        return tracker

    def _stored_run_id(self) -> str | None:
        path = self.run_dir / "run_id"
        return path.read_text().strip() if path.exists() else None

    def state_dict(self, step: int) -> dict:
        return {
            "step": step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "strategy": self.strategy.state_dict(),
            "sampler": self.sampler.state_dict(),
            "clock": self.clock.state_dict(),
            "stats": self.stats.state_dict(),
            "pending_compute_s": self.pending_compute_s,
            "wall_s": time.perf_counter() - self.t0,
            "run_id": self.run_id,
            "last_point": self.last_point,
            "logged_points": self.logged_points,
            "rng": rng_state(self.workload.aug_gen),
        }

    def save(self, step: int) -> None:
        checkpoint.save_rank(self.run_dir, step, self.rank, self.state_dict(step))
        self.comm.barrier()
        if self.rank == 0:
            checkpoint.commit(self.run_dir, step, self.hash, self.world)
        self.comm.barrier()

    def restore(self) -> int:
        state = checkpoint.load_rank(self.run_dir, self.rank, self.hash)
        if state is None:
            return 0
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.strategy.load_state_dict(state["strategy"])
        self.sampler.load_state_dict(state["sampler"])
        self.clock.load_state_dict(state["clock"])
        self.stats.load_state_dict(state["stats"])
        self.pending_compute_s = state["pending_compute_s"]
        self.wall_offset_s = state["wall_s"]
        self.run_id = state["run_id"]
        self.last_point = state["last_point"]
        self.logged_points = state["logged_points"]
        set_rng_state(state["rng"], self.workload.aug_gen)
        return state["step"]

    def finish(self, tracker: Tracker | None) -> dict | None:
        final_model = averaged_model(self.model, self.comm)
        self.comm.barrier()
        if self.rank != 0:
            return None
        checkpoint.save_model(self.run_dir / "final_model.pt", final_model.state_dict())
        summary = dict(self.last_point)
        summary["run_dir"] = str(self.run_dir)
        summary["run_id"] = self.run_id
        if self.cfg.trainer.target_acc > 0:
            summary["target/reached"] = float(self.reached_target())
        if tracker is not None:
            tracker.set_summary(summary)
            tracker.finish()
        checkpoint.write_json(self.run_dir / "summary.json", summary)
        return summary
