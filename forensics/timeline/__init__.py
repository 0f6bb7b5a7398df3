"""The timeline: every source of a case on one true UTC axis.

`clocks` ranks time sources, applies zones and clock offsets, finds wall-clock steps and the
plausible window; `host_read` reads one host's events (a task per host folder); `align` builds the
`Timeline` from those tasks (a lean one for big cases);
`logs` reads log lines with a profile (`_lines.c`: a batch line's numbers in one pass, and each
distinct line once);
`metrics` derives series from samples (rates, restarts, quantiles, stalls); `progress` counts the
progress lines each host task finds, which the freeze detector then reads.
"""
