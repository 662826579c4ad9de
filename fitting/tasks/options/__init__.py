"""One module per task option (task=<name>): its schema, checks and builder."""
