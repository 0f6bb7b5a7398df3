"""The colour language of every report: phases, key times, states, components, tracks and the
symbol of each failure mode, chosen so that a thing keeps its colour whatever else is drawn."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from forensics.analyze import Analysis


PHASE_COLOURS = {"collective": "#d62728", "idle": "#1f77b4", "transfer": "#9467bd", "compute": "#2ca02c",
                 "device_sync": "#8c564b", "network": "#e377c2", "unknown": "#7f7f7f"}
KEY_TIME_COLOURS = {"started": "#d62728", "detected": "#ff7f0e", "mitigated": "#9467bd", "resolved": "#2ca02c"}
ERROR_KINDS_COLOUR = "#d62728"
OVERVIEW_COLOURS = {"progress": "#5aae61", "frozen": "#d73027"}
# One symbol per failure mode (the layer profiles' `fault`), drawn over its track's lane.
FAULT_SYMBOLS = {"collective timeout": "hourglass", "device fault": "bowtie", "out of memory": "star-triangle-down",
                 "crash loop": "circle-cross", "process ended": "x-thin-open", "transport failure": "hexagram",
                 "kernel hang": "hourglass-open", "disk full": "square-x-open", "capacity": "triangle-down-open",
                 "platform": "pentagon-open"}
FAULT_COLOUR = "#b2182b"


# The colour language, the same in every report: states (working green, frozen / error red,
# detected orange, lifecycle purple: OVERVIEW_COLOURS, KEY_TIME_COLOURS, ERROR_KINDS_COLOUR) never
# name a component, and a component or a track keeps its colour whatever else a report draws.
STATE_COLOURS = frozenset({*OVERVIEW_COLOURS.values(), *KEY_TIME_COLOURS.values(), ERROR_KINDS_COLOUR,
                           "#9467bd", "#b2182b"})
COMPONENT_COLOURS = {"decode": "#1f77b4", "prefill": "#8c564b", "router": "#e377c2", "engine": "#17becf"}
DASHES = ("solid", "dot", "dash", "dashdot", "longdash")
OTHER_COLOURS = ("#7f7f7f", "#bcbd22", "#393b79", "#843c39", "#6b6ecf", "#8c6d31", "#e7969c", "#9edae5")
TRACK_COLOURS = ("#393b79", "#8c6d31", "#7b4173", "#5254a3", "#636363")


def stable_colour(name: str, palette: Sequence[str]) -> str:
    """A colour of `palette` chosen by `name` alone (not by what else is drawn, nor the order)."""
    return palette[zlib.crc32(name.encode()) % len(palette)]


def series_colour(series: str) -> str:
    """A metric series' colour: its component's, else one fixed by its instance's name."""
    component = series.split(" ", 1)[0]
    return COMPONENT_COLOURS.get(component) or stable_colour(series.rsplit(" ", 1)[0], OTHER_COLOURS)


def track_colour(analysis: Analysis, track: str) -> str:
    """The main track's colour is the first of TRACK_COLOURS in every report; others by name."""
    main = analysis.main_track
    return TRACK_COLOURS[0] if track == main else stable_colour(track, TRACK_COLOURS[1:])
