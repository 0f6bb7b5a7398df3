"""py-spy: dumps as text and `--json`, what both share per dump (`dumps`: capture context, ranks
from titles), and dumps as people paste them (`paste`)."""
