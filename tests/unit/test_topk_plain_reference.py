"""Flexible Top-k through the strategy, against Top-k SGD with error feedback written here in
plain torch: the same parameters bit for bit after 20 steps of 4 simulated workers.

The reference below imports nothing of `repro.compress` or `repro.strategies`: it selects
with `torch.topk`, keeps its own residuals, picks its own leaders (STAR round robin, VAR by
||g||^2, ||G||^2 or the authors' windowed ||g||), its own collective (the cheapest of the
cost model's three exchanges, Eq. 4) and, for the MOO controller (Eq. 6), probes every
candidate from a snapshot itself and hands the gains to the same `MOORatioController` the
strategy uses. Sums over workers run in rank order, as the simulated engine's collectives
sum, so the two agree bit for bit rather than to rounding: any change to what the strategy
sends, keeps or applies shows up as a changed parameter.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from repro.comm.axis_collectives import AxisCollectives
from repro.compress.ratio import MOORatioController
from repro.netmodel import cost
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.topk import TopKConfig, TopKStrategy
from repro.train.replicas import Replicas

N, STEPS, LR, BATCH = 4, 20, 0.1, 8
SCALE = 1e5  # bytes_scale: messages the size of a ResNet's, so bandwidth decides the switch
FAST = Link(50e-3, 25e9 / 8)  # high latency, high bandwidth: allgather is the cheapest
SLOW = Link(1e-3, 1e9 / 8)  # low bandwidth: AR-Topk over a ring is
SWITCHING = [FAST] * 7 + [SLOW] * 7 + [FAST] * 6
STEADY = [FAST] * STEPS
DECISIONS = ("method/cr", "method/collective", "method/k", "method/leader", "method/probes")
MOO = {
    "cr_controller": "moo",
    "candidates": [0.1, 0.01],
    "probe_steps": 2,
    "gain_window": 4,
}


def template() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def batch(worker: int, step: int, probe: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Worker `worker`'s batch at `step`, or at probe step `probe` of that step's probing."""
    gen = torch.Generator().manual_seed(100_000 * step + 1_000 * (probe + 1) + worker)
    return torch.randn(BATCH, 10, generator=gen), torch.randint(0, 4, (BATCH,), generator=gen)


# ------------------------------------------------------------------ the plain reference
def ordered_sum(rows: list[torch.Tensor]) -> torch.Tensor:
    total = rows[0].clone()
    for row in rows[1:]:
        total = total + row
    return total


def largest(row: torch.Tensor, ks: list[int], sizes: list[int]) -> torch.Tensor:
    """Ascending positions of each segment's ks[j] largest magnitudes."""
    picks, offset = [], 0
    for k, size in zip(ks, sizes, strict=True):
        if k:
            picks.append(torch.topk(row[offset : offset + size].abs(), k).indices + offset)
        offset += size
    return torch.cat(picks).sort().values


def keep_counts(sizes: list[int], cr: float, layerwise: bool, split: str) -> list[int]:
    """Entries kept per segment: the whole vector's max(1, int(c n)), or per tensor."""
    total = sum(sizes)
    if not layerwise:
        return [min(total, max(1, int(cr * total)))]
    if split == "per_tensor":
        return [min(s, max(1, int(cr * s))) for s in sizes]
    k = min(total, max(1, int(cr * total)))  # exact budget: largest remainder
    shares = [k * s // total for s in sizes]
    order = sorted(range(len(sizes)), key=lambda i: -((k * sizes[i]) % total))
    for i in order[: k - sum(shares)]:
        shares[i] += 1
    return shares


class Plain:
    """N workers of Top-k SGD with error feedback, one plain model each."""

    def __init__(self, cfg: dict):
        self.cfg = {**TopKConfig().__dict__, **cfg}
        self.models = [copy.deepcopy(template()) for _ in range(N)]
        self.sizes = [p.numel() for p in self.models[0].parameters()]
        self.numel = sum(self.sizes)
        self.nbytes = self.numel * 4 * self.cfg["bytes_scale"]
        self.residuals = [torch.zeros(self.numel) for _ in range(N)]
        self.norm_history: list[list[float]] = [[] for _ in range(N)]
        self.decisions: list[dict] = []

    def grads(self, step: int, probe: int = -1) -> list[torch.Tensor]:
        out = []
        for w, model in enumerate(self.models):
            model.zero_grad()
            x, y = batch(w, step, probe)
            F.cross_entropy(model(x), y).backward()
            out.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        return out

    def sgd(self, averages: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for model, avg in zip(self.models, averages, strict=True):
                for p, g in zip(model.parameters(), avg.split(self.sizes), strict=True):
                    p.sub_(LR * g.view_as(p))

    def collective(self, cr: float, link: Link) -> str:
        if cr == 1:
            ring = cost.ring_allreduce(link, self.nbytes, N)
            return "ar_tree" if cost.tree_allreduce(link, self.nbytes, N) < ring else "ar_ring"
        if self.cfg["collective"] != "auto":
            return self.cfg["collective"]
        name = cost.cheapest(link, self.nbytes, cr, N)[0]
        return {"ag_topk": "allgather", "art_ring": "ar_ring", "art_tree": "ar_tree"}[name]

    def leader(self, step: int, grads: list[torch.Tensor], comp: list[torch.Tensor]) -> int:
        rule = self.cfg["leader"]
        if rule == "star":
            return (step - 1) % N
        if self.cfg["var_norm"] == "grad_plus_residual":
            stats = [c.pow(2).sum().item() for c in comp]
        else:
            stats = [g.pow(2).sum().item() for g in grads]
        if self.cfg["var_norm"] == "ewma_grad":
            window, a = self.cfg["var_window"], self.cfg["var_smoothing"]
            for w in range(N):
                self.norm_history[w] = (self.norm_history[w] + [stats[w] ** 0.5])[-window:]
            full = len(self.norm_history[0]) == window
            weights = [(1 - a) ** (window - j) for j in range(window)]
            stats = [
                sum(wt * v for wt, v in zip(weights, h, strict=True)) / sum(weights) if full else 0
                for h in self.norm_history
            ]
        # the wire carries each worker's statistic as a float32; ties go to the lowest rank
        wire = torch.tensor(stats, dtype=torch.float32).tolist()
        return max(range(N), key=lambda w: wire[w])

    def exchange(self, step: int, cr: float, link: Link, grads: list[torch.Tensor]):
        """One exchange: every worker's averaged gradient; residuals updated; the gain."""
        comp = [g + r for g, r in zip(grads, self.residuals, strict=True)]
        collective = self.collective(cr, link)
        ks = keep_counts(self.sizes, cr, self.cfg["layerwise"], self.cfg["layer_split"])
        segments = self.sizes if self.cfg["layerwise"] else [self.numel]
        leader = -1
        if cr == 1:
            average = ordered_sum(comp) / N
            sent = [torch.arange(self.numel)] * N
        elif collective == "allgather":
            sent = [largest(c, ks, segments) for c in comp]
            dense = []
            for c, idx in zip(comp, sent, strict=True):
                d = torch.zeros(self.numel)
                d[idx] = c[idx]
                dense.append(d)
            average = ordered_sum(dense) / N
        else:
            leader = self.leader(step, grads, comp)
            idx = largest(comp[leader], ks, segments)
            average = torch.zeros(self.numel)
            average[idx] = ordered_sum([c[idx] for c in comp]) / N
            sent = [idx] * N
        sent_sq = [c[idx].pow(2).sum() for c, idx in zip(comp, sent, strict=True)]
        total_sq = [c.pow(2).sum() for c in comp]
        if collective == "allgather" and cr < 1:
            sums = torch.stack(sent_sq).sum().item(), torch.stack(total_sq).sum().item()
        else:
            sums = ordered_sum(sent_sq).item(), ordered_sum(total_sq).item()
        gain = 1.0 if cr == 1 else sums[0] / sums[1] if sums[1] > 0 else 1.0
        for w in range(N):
            self.residuals[w] = comp[w].clone()
            self.residuals[w][sent[w]] = 0.0
        decision = {
            "method/cr": cr,
            "method/collective": collective,
            "method/k": self.numel if cr == 1 else sum(ks),
            "method/leader": leader,
        }
        return [average] * N, gain, decision

    def sync_seconds(self, cr: float, link: Link) -> float:
        name = self.collective(cr, link)
        table = {"allgather": cost.ag_topk, "ar_ring": cost.art_ring, "ar_tree": cost.art_tree}
        seconds = table[name](link, self.nbytes, cr, N)
        if self.cfg["leader"] == "var" and name != "allgather":
            seconds += cost.allgather(link, 4 * self.cfg["bytes_scale"], N)
        return seconds

    def probe(self, step: int, link: Link) -> dict[float, tuple[float, float]]:
        """Each candidate's mean gain over probe steps from this step's snapshot."""
        saved = [copy.deepcopy(m.state_dict()) for m in self.models]
        residuals = [r.clone() for r in self.residuals]
        history = copy.deepcopy(self.norm_history)
        probes = {}
        for c in self.cfg["candidates"]:
            gains = []
            self.residuals = [r.clone() for r in residuals]
            self.norm_history = copy.deepcopy(history)
            for i in range(self.cfg["probe_steps"]):
                averages, gain, _ = self.exchange(step + i, c, link, self.grads(step, i))
                gains.append(gain)
                self.sgd(averages)
            for model, state in zip(self.models, saved, strict=True):
                model.load_state_dict(state)
            probes[c] = (sum(gains) / len(gains), self.sync_seconds(c, link))
        self.residuals, self.norm_history = residuals, history
        return probes

    def run(self, links: list[Link]) -> list[list[torch.Tensor]]:
        cfg = self.cfg
        moo = cfg["cr_controller"] == "moo"
        controller = MOORatioController(
            cfg["candidates"],
            cfg["weights"],
            cfg["ratio_bounds"],
            seed=cfg["seed"],
            reprobe_change=cfg["reprobe_change"],
        )
        cr, probe_due, probes, window, last = cfg["cr"], moo, 0, [], None
        for step, link in enumerate(links, start=1):
            grads = self.grads(step)
            if probe_due:
                controller.solve(self.probe(step, link))
                probes, probe_due, window = probes + 1, False, []
            elif moo and last is not None and link != last and controller.gains:
                controller.solve(
                    {c: (g, self.sync_seconds(c, link)) for c, g in controller.gains.items()}
                )
                window = []  # the reference gain is the first block's at the new ratio
            last = link
            if moo:
                cr = controller.cr
            averages, gain, decision = self.exchange(step, cr, link, grads)
            self.decisions.append({**decision, "method/probes": probes})
            self.sgd(averages)
            window.append(gain)
            if moo and len(window) == cfg["gain_window"]:
                probe_due = controller.needs_probe(sum(window) / len(window))
                window = []
        return [[p.detach().clone() for p in m.parameters()] for m in self.models]


# ------------------------------------------------------------------ the strategy
class Rehearsal:
    """Probe steps from a snapshot of the stacked workers, on the reference's probe batches."""

    def __init__(self, replicas: Replicas):
        self.replicas, self.step = replicas, 0

    def rehearse(self, n_steps, *runs) -> None:
        saved = self.replicas.state_dict()
        for per_step in runs:
            for i in range(n_steps):
                train_batch(self.replicas, self.step, i)
                per_step(i)
                sgd(self.replicas)
            self.replicas.load_state_dict(saved)


def train_batch(replicas: Replicas, step: int, probe: int = -1) -> None:
    xs, ys = zip(*(batch(w, step, probe) for w in range(N)), strict=True)
    replicas.forward_backward(torch.stack(xs), torch.stack(ys), F.cross_entropy)


def sgd(replicas: Replicas) -> None:
    with torch.no_grad():
        for p in replicas.parameters():
            p.sub_(LR * p.grad)


def through_strategy(cfg: dict, links: list[Link]):
    replicas = Replicas(template(), N, "loop")
    rehearsal = Rehearsal(replicas)
    strategy = TopKStrategy(TopKConfig(**cfg), N)
    strategy.setup(replicas, None, AxisCollectives(N), rehearsal)
    decisions = []
    for step, link in enumerate(links, start=1):
        train_batch(replicas, step)
        rehearsal.step = step
        strategy.after_backward(StepInfo(step, 0.0, torch.zeros(N), LR, 0.0, link))
        metrics = strategy.metrics()
        decisions.append({k: metrics[k] for k in DECISIONS})
        sgd(replicas)
    return [[p[w].detach().clone() for p in replicas.parameters()] for w in range(N)], decisions


VARIANTS = {
    "ag_flat": ({"cr": 0.05, "collective": "allgather"}, STEADY),
    "ag_layerwise": ({"cr": 0.05, "collective": "allgather", "layerwise": True}, STEADY),
    "ag_exact_budget": (
        {"cr": 0.05, "collective": "allgather", "layerwise": True, "layer_split": "exact_budget"},
        STEADY,
    ),
    "star": ({"cr": 0.05, "collective": "ar_ring", "leader": "star"}, STEADY),
    "star_layerwise": ({"cr": 0.05, "collective": "ar_tree", "layerwise": True}, STEADY),
    "var": ({"cr": 0.05, "collective": "ar_tree", "leader": "var"}, STEADY),
    "var_residual": (
        {"cr": 0.05, "collective": "ar_ring", "leader": "var", "var_norm": "grad_plus_residual"},
        STEADY,
    ),
    "var_ewma": (
        {
            "cr": 0.05,
            "collective": "ar_ring",
            "leader": "var",
            "var_norm": "ewma_grad",
            "var_window": 3,
            "var_smoothing": 0.1,
        },
        STEADY,
    ),
    "auto": ({"cr": 0.05, "collective": "auto", "bytes_scale": SCALE}, SWITCHING),
    "dense": ({"cr": 1.0, "collective": "auto"}, SWITCHING),
    "moo": ({**MOO, "bytes_scale": SCALE}, SWITCHING),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_strategy_equals_plain_topk_sgd_bit_for_bit(name):
    cfg, links = VARIANTS[name]
    params, decisions = through_strategy(cfg, links)
    plain = Plain(cfg)
    expected = plain.run(links)
    assert decisions == plain.decisions
    for w in range(N):
        for got, want in zip(params[w], expected[w], strict=True):
            assert torch.equal(got, want.view_as(got)), (name, w)
    start = template().parameters()
    moved = sum((p - q).abs().sum() for p, q in zip(params[0], start, strict=True))
    assert moved > 0.1  # the run trained


def test_the_variants_exercise_the_switch_and_the_probes():
    """The auto runs use both collectives and the MOO run probes and solves more than once."""
    plain = Plain(VARIANTS["auto"][0])
    plain.run(SWITCHING)
    assert {d["method/collective"] for d in plain.decisions} == {"allgather", "ar_ring"}
    moo = Plain(VARIANTS["moo"][0])
    moo.run(SWITCHING)
    assert len({d["method/cr"] for d in moo.decisions}) >= 2
