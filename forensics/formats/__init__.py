"""What the readers in `forensics.sources` share, by format: reading bytes (`rawio`, `byteviews`),
journald's field rules (`journal`), py-spy's layout and pasted forms (`pyspy`, `pyspy_paste`),
the Prometheus exposition grammar (`promtext`), and when a snapshot was taken (`capture`)."""
