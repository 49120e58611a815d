"""The labels a claim reads, derived from its params, against the labels its calculator
actually reads metrics of; and a claim judged on the seeds at which all its runs exist."""

import pytest

from repro.claims.calculators.registry import registered
from repro.claims.reads import labels_read
from repro.claims.verdicts import claim_seeds, evaluate
from tests.unit.report_data import claim_dict, claims_file, make_run, seeded
from tests.unit.test_claims_bands import CASES


class Recording:
    """A run that notes its label whenever its metrics (history or summary) are read."""

    def __init__(self, run, label, seen):
        self._run, self._label, self._seen = run, label, seen

    def __getattr__(self, name):
        if name in ("history", "summary"):
            self._seen.add(self._label)
        return getattr(self._run, name)


@pytest.mark.parametrize("name", sorted(registered()))
def test_labels_read_are_the_labels_every_registered_calculator_reads(name):
    assert name in CASES, f"calculator {name} needs a case in test_claims_bands.CASES"
    make, params, _ = CASES[name]
    runs = {r.config["experiment"]["label"]: r for r in make()}
    seen: set[str] = set()
    registered()[name]({label: Recording(r, label, seen) for label, r in runs.items()}, **params)
    assert seen, name
    assert labels_read(name, params, runs) == seen


def test_runs_added_for_another_claim_leave_a_claim_on_its_complete_seeds():
    # seeds 0-2 of sync, adacomm and adacomm_lrdecay; seed 3 of sync and adacomm only (added
    # to the headline's runs): the lr-decay claim is judged on seeds 0-2
    runs = []
    for seed in range(4):
        labels = ("sync", "adacomm") + (("adacomm_lrdecay",) if seed < 3 else ())
        runs += [make_run(label, loss=lambda s: 80 / s, seed=seed) for label in labels]
    lrdecay = claim_dict(
        id="lrdecay",
        metric={
            "calculator": "time_to_target_ratio",
            "params": {"run": "adacomm_lrdecay", "reference": "sync"},
        },
    )
    cf = claims_file([claim_dict(), lrdecay])
    headline, decay = cf.claims
    assert claim_seeds(headline, seeded(runs)) == [0, 1, 2, 3]
    assert claim_seeds(decay, seeded(runs)) == [0, 1, 2]
    results = evaluate(cf.claims, seeded(runs), "small")
    assert [list(r.per_seed) for r in results] == [[0, 1, 2, 3], [0, 1, 2]]
    # a seed short of a run below the last complete one is kept, and named
    held = seeded(runs)
    del held["adacomm_lrdecay"][1]
    assert claim_seeds(decay, held) == [0, 1, 2]
    (result,) = evaluate([decay], held, "small")
    assert result.verdict == "not run"
    assert result.note == "seed 1: no run labelled 'adacomm_lrdecay' (have: adacomm, sync)"
