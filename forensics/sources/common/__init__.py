"""What every reader shares: reading bytes bounded and safely (`rawio`, `byteviews`), the canonical
frames' schemas (`schema`), frames built from columns without copies (`frames`), and when a
snapshot was taken (`snapshot_time`)."""
