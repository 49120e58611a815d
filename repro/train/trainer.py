"""The training loop every method shares. It knows no method and no engine by name.

Per step: batch -> forward/backward of every held worker -> strategy.after_backward
(gradient communication) -> optimizer.step -> strategy.after_step (model/delta
communication) -> TimeKeeper (compute seconds and CommRecords in, modeled time out) ->
running metrics. Every `trainer.eval_every` steps it logs a point (the worker-averaged
model evaluated); every `trainer.checkpoint_every` steps it saves its parts.

The parts around the loop each keep their own state (`state_dict`/`load_state_dict`):
the stacked models (`Replicas`), the optimizer, the strategy, the workers' data position
and RNGs (`WorkerData`), the modeled and wall clocks (`TimeKeeper`), the running metrics
and the run's log. A checkpoint is those parts, saved and restored by iterating them.
"""

from __future__ import annotations

import torch

from repro.comm.collectives import Collectives
from repro.comm.devices import fix_kernel_order
from repro.comm.launch import stop_arrived
from repro.comm.stopwatch import Stopwatch
from repro.config import Config, config_hash, run_dir_of
from repro.netmodel.schedule import NetworkSchedule
from repro.netmodel.timekeeper import TimeKeeper
from repro.optim.config import build_optimizer, lr_at, set_lr
from repro.strategies.base import StepInfo, build_strategy
from repro.track.runs import STOPPED
from repro.train import checkpoint
from repro.train.divergence import DivergenceGuard
from repro.train.evaluate import averaged_model, test_sums, train_loss
from repro.train.metrics import RunningStats, point
from repro.train.progress import Progress
from repro.train.rehearsal import Rehearsal
from repro.train.replicas import Replicas
from repro.train.run_log import RunLog
from repro.train.worker_data import WorkerData
from repro.workload.workload import Workload, prepare


class Trainer:
    def __init__(self, cfg: Config, comm: Collectives, device: str, vectorize: str = "loop"):
        self.cfg, self.comm = cfg, comm
        self.run_dir, self.hash = run_dir_of(cfg), config_hash(cfg)
        tc = cfg.trainer
        fix_kernel_order(device, tc.deterministic)  # before the first matrix product
        self.workload = Workload(cfg.workload, prepare(cfg.workload, cfg.data, cfg.seed), device)
        torch.manual_seed(cfg.seed)  # every worker starts from the same model
        template = self.workload.model_factory().to(device)
        self.strategy = build_strategy(cfg.method, comm.world_size)
        shared = self.strategy.identical_workers
        self.replicas = Replicas(template, len(comm.ranks), vectorize, shared=shared)
        self.optimizer = build_optimizer(cfg.optim, self.replicas.parameters())
        self.data = WorkerData(self.workload, comm.ranks, comm.world_size, tc.batch_size, cfg.seed)
        self.rehearsal = Rehearsal(self.replicas, self.optimizer, self.data, self.workload.loss)
        self.strategy.setup(self.replicas, self.optimizer, comm, self.rehearsal)
        self.schedule = NetworkSchedule.from_config(cfg.network)
        net = cfg.network
        self.time = TimeKeeper(cfg.compute, comm, cfg.seed, net.bytes_scale, net.inject)
        self.stats = RunningStats()
        self.stopwatch = Stopwatch(device)
        self.log = RunLog(cfg, self.run_dir, comm.ranks[0] == 0)
        self.guard = DivergenceGuard(tc.divergence)
        self.parts = {
            "model": self.replicas,
            "optimizer": self.optimizer,
            "strategy": self.strategy,
            "data": self.data,
            "time": self.time,
            "stats": self.stats,
            "log": self.log,
            "divergence": self.guard,
        }

    # ---------------------------------------------------------------- the loop
    def run(self) -> dict | None:
        start = self.restore()
        self.log.open(self.workload)
        self.time.start_wall()
        try:
            self.loop(start)
            return self.finish()
        except BaseException as end:
            # stopped, not failed: Ctrl-C, SIGTERM as `Terminated`, a sweep's stop of its
            # trial, or a collective that a peer's stop broke after this worker's arrived
            stopped = not isinstance(end, Exception) or stop_arrived()
            self.log.finish(None, exit_code=STOPPED if stopped else 1)
            raise

    def loop(self, start: int) -> None:
        tc = self.cfg.trainer
        first = self.comm.ranks[0] == 0
        bar = Progress(
            self.cfg.label,
            tc.steps,
            tc.time_budget_s,
            start,
            self.time.now(),
            first and tc.progress,
        )
        try:  # a run stopped or failed closes its bar too: its message starts a line
            for step in range(start + 1, tc.steps + 1):
                self.train_step(step)
                now = self.time.now()
                bar.advance(now)
                out_of_time = tc.time_budget_s > 0 and now >= tc.time_budget_s
                if step % tc.eval_every == 0 or step == tc.steps or out_of_time:
                    self.log_point(step)
                    bar.show_point(self.log.last_point)
                if out_of_time or self.reached_target():
                    break
                if step % tc.checkpoint_every == 0 and step < tc.steps:
                    self.save(step)
        finally:
            bar.close()

    def train_step(self, step: int) -> None:
        tc = self.cfg.trainer
        x, y = self.data.next_batch()
        epoch = step * tc.batch_size * self.comm.world_size / self.workload.arrays.n_train
        lr = lr_at(self.cfg.optim, step, epoch)
        set_lr(self.optimizer, lr)
        link = self.schedule.link_at(epoch)

        watch = self.stopwatch  # the device's seconds: CUDA events on a GPU
        into = self.strategy.gradient_targets()
        losses, compute_s = watch.time(
            self.replicas.forward_backward, x, y, self.workload.loss, into
        )
        per_worker = losses.tolist()  # once: the guard and the running metrics read it
        self.guard.check_loss(step, per_worker)

        # time.now() is identical for every worker, so strategies that decide from it agree
        info = StepInfo(step, epoch, losses, lr, self.time.now(), link, self.time.synced_now)
        records = self.strategy.after_backward(info)
        compute_s += watch.time(self.optimizer.step)[1]
        records += self.strategy.after_step(info)

        rehearsed_s, rehearsed_steps = self.rehearsal.take()
        self.time.advance(step, compute_s + rehearsed_s, records, link, rehearsed_steps)
        self.stats.add_step(per_worker, records)

    def reached_target(self) -> bool:
        target = self.cfg.trainer.target_acc
        return target > 0 and self.log.last_point.get("test/acc", 0.0) >= target

    # ------------------------------------------------------------- log points
    def log_point(self, step: int) -> None:
        self.time.flush()
        loss = train_loss(self.stats.loss_sum, self.stats.loss_count, self.comm)
        sums = test_sums(averaged_model(self.replicas, self.comm), self.workload, self.comm)
        wall_s = self.time.wall_s()
        samples = step * self.cfg.trainer.batch_size * self.comm.world_size
        logged = point(
            step=step,
            epoch=samples / self.workload.arrays.n_train,
            samples=samples,
            train_loss=loss,
            test=((sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()),
            stats=self.stats,
            wall_s=wall_s,
            modeled_s=self.time.now(),
            lr=self.optimizer.param_groups[0]["lr"],
            strategy_metrics=self.strategy.metrics(),
        )
        self.stats.reset_interval(wall_s, samples, self.time.now())
        self.log.log(logged)
        num_classes = self.workload.arrays.num_classes
        self.guard.check_point(
            step, logged["epoch"], logged["test/acc"], logged["test/loss"], num_classes
        )

    # ------------------------------------------------------- checkpoint/resume
    def save(self, step: int) -> None:
        state = {"step": step, **{name: part.state_dict() for name, part in self.parts.items()}}
        checkpoint.save_rank(self.run_dir, step, self.comm.ranks[0], state)
        self.comm.barrier()
        if self.comm.ranks[0] == 0:
            processes = self.comm.world_size // len(self.comm.ranks)
            keep = self.cfg.trainer.keep_checkpoints
            checkpoint.commit(self.run_dir, step, self.hash, processes, keep)
        self.comm.barrier()

    def restore(self) -> int:
        state = checkpoint.load_rank(self.run_dir, self.comm.ranks[0], self.hash)
        if state is None:
            return 0
        for name, part in self.parts.items():
            part.load_state_dict(state[name])
        return state["step"]

    def finish(self) -> dict | None:
        final_model = averaged_model(self.replicas, self.comm)
        self.comm.barrier()
        if self.comm.ranks[0] != 0:
            return None
        # On the CPU: the trained model opens on any machine, not only one with the run's
        # device (checkpoints keep their device: a run resumes where it ran).
        weights = {k: v.cpu() for k, v in final_model.state_dict().items()}
        checkpoint.save_model(self.run_dir / "final_model.pt", weights)
        summary = {**self.log.last_point, "run_dir": str(self.run_dir), "run_id": self.log.run_id}
        if self.cfg.trainer.target_acc > 0:
            summary["target/reached"] = float(self.reached_target())
        self.log.finish(summary)
        return summary
