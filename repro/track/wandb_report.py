"""A reproduction's W&B Report built from its spec, ready to save on the server.

The spec is plain data (`repro.report.wandb_spec` writes it from a reproduction's report):
text, tables as Markdown, and panel grids naming their runs by id. `to_report` turns it into
a `wandb_workspaces` Report once the entity is known: each panel grid over the runs it
names, grouped by run label (`experiment.label`) so that wandb draws each method's mean over
its seeds with a band from the lowest to the highest seed, in the colour the spec gives it.
`SPEC_FORMAT` names the spec's version, so a spec saved by another version is refused rather
than half read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import wandb_workspaces.reports.v2 as wr

from repro.errors import UserError

SPEC_FORMAT = "repro wandb report spec 1"
GROUP_BY = "experiment.label"  # a run's label within its set: one group per method
BAND = "minmax"  # the band spans the lowest to the highest seed


def _panel_grid(block: Mapping[str, Any], entity: str, project: str) -> wr.PanelGrid:
    group = block["group"]
    ids = ", ".join(f"'{run_id}'" for run_id in block["run_ids"])
    filters = f"Group = '{group}' and ID in [{ids}]"
    name = f"{group}: {block['title']}"
    runset = wr.Runset(
        entity=entity, project=project, name=name, filters=filters, groupby=[f"config.{GROUP_BY}"]
    )
    panels: list = [
        wr.LinePlot(
            title=line["title"],
            x=line["x"],
            y=[line["y"]],
            log_x=line["log_x"] or None,
            log_y=line["log_y"] or None,
            title_x=line["title_x"],
            title_y=line["title_y"],
            groupby=wr.Config(GROUP_BY),
            groupby_aggfunc="mean",
            groupby_rangefunc=BAND,
            max_runs_to_show=len(block["colours"]),
        )
        for line in block["lines"]
    ]
    if block["references"]:
        text = "**Reference lines**\n\n" + "\n".join(f"- {r}" for r in block["references"])
        panels.append(wr.MarkdownPanel(markdown=text))
    colours = {
        wr.RunsetGroup(name, (wr.RunsetGroupKey(wr.Config(GROUP_BY), label),)): colour
        for label, colour in block["colours"].items()
    }
    return wr.PanelGrid(runsets=[runset], panels=panels, custom_run_colors=colours)


def to_report(spec: Mapping[str, Any], entity: str) -> wr.Report:
    """The `wandb_workspaces` Report of a spec from `build_spec`, not saved."""
    project = spec["project"]
    blocks: list = []
    for block in spec["blocks"]:
        kind = block["kind"]
        if kind == "p":
            blocks.append(wr.P(block["text"]))
        elif kind == "h2":
            blocks.append(wr.H2(block["text"]))
        elif kind == "markdown":
            blocks.append(wr.MarkdownBlock(block["text"]))
        elif kind == "panels":
            blocks.append(wr.H3(block["title"]))
            blocks.append(_panel_grid(block, entity, project))
        else:
            raise UserError(f"wandb report spec: unknown block kind {kind!r}")
    return wr.Report(
        project=project,
        entity=entity,
        title=spec["title"],
        description=spec["description"],
        blocks=blocks,
    )
