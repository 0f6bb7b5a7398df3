"""Capture: taking the evidence off a live host before anyone restarts it.

`collect` writes a bundle on the affected host as its `plan` says (every value checked first), and
`sh_script` prints a POSIX `sh` script doing the same where nothing can be installed; `watch` polls
the engines and runs `collect` the moment one hangs; `pull` fetches the incident window from a
Prometheus-compatible API into a bundle; `watch.service` is the systemd unit that runs `watch`.
First in the data flow, but `watch` judges what it took with the same readers and detectors the
analysis runs, so in the import graph this stage sits beside the entry points (docs/layout.md).
"""
