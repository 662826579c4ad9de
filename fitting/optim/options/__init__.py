"""One module per optimizer option (optimizer=<name>): its schema, checks and builder."""
