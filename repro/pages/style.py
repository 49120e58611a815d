"""The report pages' stylesheet, shared by every paper's page, the index and comparisons.

Pages must fit a 1,280 px window: the body is capped a little below it, long cell text and
long commands wrap (at spaces, and after the '_' and '/' of labels and paths, where the
page puts a break opportunity), and a table that is still wider than the body scrolls
sideways inside its own box (`.table-wrap`) rather than widening the page. `repro report
check` fails a page that is wider than its window all the same.
"""

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 1.5em auto;
       padding: 0 1.5em; color: #222; line-height: 1.4; }
h1 { font-size: 1.7em; margin-bottom: 0.3em; }
h2 { font-size: 1.3em; margin: 1.6em 0 0.4em; }
p, li, figcaption { overflow-wrap: anywhere; max-width: 75em; }
.lead { font-size: 1.05em; margin: 0.2em 0; }
.rule { font-size: 0.85em; color: #555; }
.table-wrap { overflow-x: auto; max-width: 100%; margin: 0.4em 0 1.2em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
td { overflow-wrap: break-word; }
th { background: #f2f2f2; overflow-wrap: break-word; }
table.summary { font-size: 1em; }
table.summary td:nth-child(1) { min-width: 22em; }
table.summary td:nth-child(2), table.summary td:nth-child(3) { min-width: 9em; }
table.summary td:nth-child(4) { min-width: 12em; }
table.summary a { font-size: 0.85em; }
table.keyvalue td:first-child { white-space: nowrap; }
code { font-size: 0.95em; background: #f4f4f4; padding: 0 0.2em; overflow-wrap: anywhere; }
a { color: #0b57a4; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #444; }
.v-reproduced, .v-holds { background: #d8f0d8; } .v-partly, .v-partly-holds { background: #fff1c4; }
.v-undecided { background: #fbd9b0; } .v-inconclusive { background: #e6d4f0; }
.v-not-reproduced, .v-does-not-hold, .v-refused { background: #f7d4d4; }
.v-not-run, .v-not-measured, .v-not-assessed { background: #e8e8e8; }
.missing { color: #a00; }
"""
