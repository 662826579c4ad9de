"""One module per optimizer option (optimizer=<name>): its schema, checks, builder and hooks."""
