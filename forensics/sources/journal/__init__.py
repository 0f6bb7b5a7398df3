"""journald: the host's own `.journal` files, `journalctl -o export` and `-o json`, and the
journal's field rules they share (`fields`; the export scanner's hot loop is `_export_scan.c`)."""
